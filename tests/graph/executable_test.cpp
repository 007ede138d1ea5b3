// Executable: memory planning, aliasing and variables on the structural ops.
#include "lockstep/graph/executable.h"

#include <gtest/gtest.h>

using namespace lockstep;

TEST(Executable, ReshapeAliasAndAssign) {
  Graph g;
  Value x = g.input({DType::f32, Shape{2, 3}}, "x");
  Value r = g.add(op::reshape, {x}, Attrs{{"shape", std::vector<int64_t>{3, -1}}});
  EXPECT_EQ(g.type(r).shape, (Shape{3, 2}));
  auto var = std::make_shared<Variable>(Variable{"v", Tensor::zeros(Shape{3, 2}), true});
  Value v = g.variable(var);
  g.add_multi(op::assign_add, {v, r});
  Executable exe(g, {x}, {r});
  exe.input(0).copy_from(Tensor::from_vector(Shape{2, 3}, {1, 2, 3, 4, 5, 6}));
  exe.run();
  EXPECT_EQ(exe.output(0).to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  exe.run();
  EXPECT_EQ(var->value.to_vector(), (std::vector<float>{2, 4, 6, 8, 10, 12}));
}

TEST(Executable, BadReshapeNamesNode) {
  Graph g;
  Value x = g.input({DType::f32, Shape{2, 3}}, "x");
  try {
    g.add(op::reshape, {x}, Attrs{{"shape", std::vector<int64_t>{4, 2}}}, "my_reshape");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("my_reshape"), std::string::npos) << e.what();
  }
}
