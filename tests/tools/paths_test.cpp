// lockstep/tools/paths.h: the same-file check every command runs on its outputs, and the
// escaping of names printed on a terminal.
#include "lockstep/tools/paths.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "test_util.h"

using namespace lockstep;
namespace fs = std::filesystem;

TEST(ToolsPaths, SameFileSeesLinksAndOtherSpellings) {
  const fs::path dir = test_util::temp_dir("tools_paths", /*fresh=*/true);
  const std::string a = (dir / "a.keras").string(), b = (dir / "b.keras").string();
  std::ofstream(a) << "model";
  std::ofstream(b) << "other";
  fs::create_hard_link(a, dir / "hard.keras");
  fs::create_symlink(a, dir / "soft.keras");
  EXPECT_TRUE(tools::same_file(a, a));
  EXPECT_TRUE(tools::same_file(a, (dir / "." / "a.keras").string()));
  EXPECT_TRUE(tools::same_file(a, (dir / "hard.keras").string()));
  EXPECT_TRUE(tools::same_file((dir / "soft.keras").string(), a));
  EXPECT_FALSE(tools::same_file(a, b));
  EXPECT_FALSE(tools::same_file(a, (dir / "missing.keras").string()));

  const std::string msg = test_util::error_of([&] {
    tools::check_output_is_not_input("export-onnx", (dir / "hard.keras").string(), {b, a});
  });
  EXPECT_NE(msg.find("export-onnx"), std::string::npos) << msg;
  EXPECT_NE(msg.find("same file as the input '" + a + "'"), std::string::npos) << msg;
  // A new output, or one that is another file, is fine.
  tools::check_output_is_not_input("export-onnx", (dir / "new.onnx").string(), {a});
  tools::check_output_is_not_input("export-onnx", b, {a, ""});
  fs::remove_all(dir);
}

TEST(ToolsPaths, PrintableEscapesTerminalControls) {
  EXPECT_EQ(tools::printable("daisy"), "daisy");
  EXPECT_EQ(tools::printable("t\xc3\xa9l\xc3\xa9"), "t\xc3\xa9l\xc3\xa9");  // UTF-8 stays
  EXPECT_EQ(tools::printable("a\x1b[31mred"), "a\\e[31mred");
  EXPECT_EQ(tools::printable("x\ty\nz\r"), "x\\ty\\nz\\r");
  EXPECT_EQ(tools::printable(std::string("b\x07\x7f", 3)), "b\\x07\\x7f");
  EXPECT_EQ(tools::printable("\xc2\x9b"
                             "2J"),
            "\\u009b2J");  // C1 CSI
  EXPECT_EQ(tools::printable("a\\b"), "a\\\\b");
  EXPECT_EQ(tools::printable(std::string("n\0ul", 4)), "n\\x00ul");
}
