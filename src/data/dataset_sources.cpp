// Sources: from_tensor_slices, from_tensors, range, list_files, from_generator, zip.
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <random>

#include "data/dataset_node.h"

namespace lockstep::data {

namespace {

// ----- slices ------------------------------------------------------------------------------

class SlicesNode : public DatasetNode {
 public:
  SlicesNode(Element columns, int64_t rows, std::string label)
      : columns_(std::move(columns)), rows_(rows), label_(std::move(label)) {}

  std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext>,
                                              uint64_t) const override {
    struct It : IteratorNode {
      std::shared_ptr<const SlicesNode> node;
      int64_t i = 0;
      bool next(Element& out) override {
        if (i >= node->rows_) return false;
        out = element_rows_slice(node->columns_, i, i + 1, /*squeeze=*/true);
        ++i;
        return true;
      }
    };
    auto it = std::make_unique<It>();
    it->node = std::static_pointer_cast<const SlicesNode>(shared_from_this());
    return it;
  }
  int64_t cardinality() const override { return rows_; }
  std::optional<ElementSpec> spec() const override {
    ElementSpec s = spec_of(columns_);
    for (auto& c : s.components) {
      if (c.kind == ComponentKind::strings) {
        c.kind = ComponentKind::string;
        c.shape = Shape{};
      } else {
        std::vector<int64_t> rest(c.shape.begin() + 1, c.shape.end());
        c.shape = Shape(rest);
      }
    }
    return s;
  }
  std::string label() const override { return label_; }
  bool reads_files() const override {
    for (const Component& c : columns_.parts)
      if (std::holds_alternative<Strings>(c)) return true;
    return false;
  }
  void hash_source(Hasher& h) const override {
    for (const Component& c : columns_.parts) {
      if (auto* t = std::get_if<Tensor>(&c)) {
        h.u64(uint64_t(t->dtype()));
        for (int64_t d : t->shape()) h.u64(uint64_t(d));
        h.bytes(t->raw(), t->nbytes());
      } else if (auto* s = std::get_if<Strings>(&c)) {
        for (const auto& str : *s) h.str(str);
      }
    }
  }

 protected:
  Element columns_;  // contiguous tensors / Strings with `rows_` rows
  int64_t rows_;
  std::string label_;
};

// list_files is slices of path strings whose fingerprint includes the files' sizes and mtimes,
// so a file cache downstream is rebuilt when any input file changes.
class ListFilesNode : public SlicesNode {
 public:
  ListFilesNode(Element columns, int64_t rows, std::string label)
      : SlicesNode(std::move(columns), rows, std::move(label)) {}
  void hash_source(Hasher& h) const override {
    for (const std::string& path : std::get<Strings>(columns_.parts[0])) {
      h.str(path);
      struct stat st {};
      if (::stat(path.c_str(), &st) == 0) {
        h.u64(uint64_t(st.st_size));
        h.u64(uint64_t(st.st_mtim.tv_sec));
        h.u64(uint64_t(st.st_mtim.tv_nsec));
      } else {
        h.u64(~0ull);
      }
    }
  }
};

// ----- range -------------------------------------------------------------------------------

class RangeNode : public DatasetNode {
 public:
  RangeNode(int64_t start, int64_t stop, int64_t step) : start_(start), stop_(stop), step_(step) {}
  std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext>,
                                              uint64_t) const override {
    struct It : IteratorNode {
      int64_t v, stop, step;
      bool next(Element& out) override {
        if (step > 0 ? v >= stop : v <= stop) return false;
        Tensor t = Tensor::empty(Shape{}, DType::i64);
        *t.data<int64_t>() = v;
        out = Element{t};
        v += step;
        return true;
      }
    };
    auto it = std::make_unique<It>();
    it->v = start_;
    it->stop = stop_;
    it->step = step_;
    return it;
  }
  int64_t cardinality() const override {
    if (step_ > 0) return stop_ > start_ ? (stop_ - start_ + step_ - 1) / step_ : 0;
    return start_ > stop_ ? (start_ - stop_ - step_ - 1) / -step_ : 0;
  }
  std::optional<ElementSpec> spec() const override {
    return ElementSpec{{ComponentSpec{ComponentKind::tensor, DType::i64, Shape{}}}};
  }
  std::string label() const override {
    return "range(" + std::to_string(start_) + "," + std::to_string(stop_) + "," +
           std::to_string(step_) + ")";
  }

 private:
  int64_t start_, stop_, step_;
};

// ----- generator ---------------------------------------------------------------------------

class GeneratorNode : public DatasetNode {
 public:
  GeneratorNode(std::function<Dataset::Generator()> factory, GeneratorOptions opts)
      : factory_(std::move(factory)), opts_(std::move(opts)) {}
  std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext>,
                                              uint64_t) const override {
    struct It : IteratorNode {
      Dataset::Generator gen;
      std::string name;
      int64_t index = 0;
      bool done = false;
      bool next(Element& out) override {
        if (done) return false;
        std::optional<Element> e;
        try {
          e = gen();
        } catch (...) {
          rethrow_with_context("from_generator(" + name + "): element " + std::to_string(index++));
        }
        if (!e) {
          done = true;
          return false;
        }
        ++index;
        out = std::move(*e);
        return true;
      }
    };
    auto it = std::make_unique<It>();
    it->name = opts_.name;
    try {
      it->gen = factory_();
    } catch (...) {
      rethrow_with_context("from_generator(" + opts_.name + "): the factory failed");
    }
    LS_CHECK(it->gen, "from_generator(", opts_.name, "): the factory returned an empty function");
    return it;
  }
  int64_t cardinality() const override { return kUnknownCardinality; }
  std::optional<ElementSpec> spec() const override { return opts_.output_spec; }
  std::string label() const override { return "from_generator(" + opts_.name + ")"; }

 private:
  std::function<Dataset::Generator()> factory_;
  GeneratorOptions opts_;
};

// ----- zip ---------------------------------------------------------------------------------

class ZipNode : public DatasetNode {
 public:
  explicit ZipNode(std::vector<NodePtr> in) : in_(std::move(in)) {}
  NodePtr with_inputs(std::vector<NodePtr> in, const std::string&) const override {
    return std::make_shared<ZipNode>(std::move(in));
  }
  std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext> ctx,
                                              uint64_t stream) const override {
    struct It : IteratorNode {
      std::vector<std::unique_ptr<IteratorNode>> in;
      bool next(Element& out) override {
        Element z;
        for (auto& it : in) {
          Element e;
          if (!it->next(e)) return false;
          for (auto& p : e.parts) z.parts.push_back(std::move(p));
        }
        out = std::move(z);
        return true;
      }
      void report(std::vector<std::string>& lines) const override {
        for (auto& it : in) it->report(lines);
      }
    };
    auto it = std::make_unique<It>();
    for (const auto& n : in_) it->in.push_back(n->make_iterator(ctx, stream));
    return it;
  }
  int64_t cardinality() const override {
    int64_t best = kInfiniteCardinality;
    for (const auto& n : in_) {
      int64_t c = n->cardinality();
      if (c == kUnknownCardinality) return kUnknownCardinality;
      if (c != kInfiniteCardinality && (best == kInfiniteCardinality || c < best)) best = c;
    }
    return best;
  }
  std::optional<ElementSpec> spec() const override {
    ElementSpec s;
    for (const auto& n : in_) {
      auto sub = n->spec();
      if (!sub) return std::nullopt;
      s.components.insert(s.components.end(), sub->components.begin(), sub->components.end());
    }
    return s;
  }
  std::string label() const override { return "zip"; }
  std::vector<NodePtr> inputs() const override { return in_; }

 private:
  std::vector<NodePtr> in_;
};

}  // namespace

Dataset Dataset::from_tensor_slices(std::vector<Component> components) {
  LS_CHECK(!components.empty(), "from_tensor_slices: no components given");
  Element columns;
  for (size_t c = 0; c < components.size(); ++c) {
    Component& comp = components[c];
    if (auto* t = std::get_if<Tensor>(&comp)) {
      LS_CHECK(t->defined(), "from_tensor_slices: component ", c, " is an undefined Tensor");
      columns.parts.emplace_back(t->contiguous());
    } else {
      LS_CHECK(!std::holds_alternative<std::string>(comp), "from_tensor_slices: component ", c,
               " is a single string; pass Strings (a vector of strings) to slice paths");
      columns.parts.push_back(comp);
    }
  }
  const int64_t rows = element_rows(columns, "from_tensor_slices");
  return Dataset(std::make_shared<SlicesNode>(std::move(columns), rows,
                                              "from_tensor_slices(" + std::to_string(rows) + ")"));
}

Dataset Dataset::from_tensors(Element element) {
  // One row: add a leading dimension of 1 to each component and slice it back off.
  Element columns;
  for (size_t c = 0; c < element.size(); ++c) {
    if (auto* t = std::get_if<Tensor>(&element.parts[c])) {
      Tensor src = t->contiguous();
      std::vector<int64_t> dims{1};
      for (int64_t d : src.shape()) dims.push_back(d);
      columns.parts.emplace_back(src.reshape(Shape(dims)));
    } else if (auto* s = std::get_if<std::string>(&element.parts[c])) {
      columns.parts.emplace_back(Strings{*s});
    } else {
      LS_FAIL("from_tensors: component ", c, " is Strings; only Tensors and strings supported");
    }
  }
  return Dataset(std::make_shared<SlicesNode>(std::move(columns), 1, "from_tensors"));
}

Dataset Dataset::range(int64_t start, int64_t stop, int64_t step) {
  LS_CHECK(step != 0, "range: step must not be 0");
  return Dataset(std::make_shared<RangeNode>(start, stop, step));
}

Dataset Dataset::list_files(const std::string& pattern, ListFilesOptions options) {
  LS_CHECK(!pattern.empty(), "list_files: empty pattern");
  glob_t g{};
  int rc = ::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g);
  Strings files;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  LS_CHECK(rc == 0 || rc == GLOB_NOMATCH, "list_files: cannot read the directories of pattern '",
           pattern, "' (glob error ", rc, ")");
  LS_CHECK(!files.empty(), "list_files: no files match the pattern '", pattern,
           "'; check the directory and the wildcards (*, ?, [...])");
  std::sort(files.begin(), files.end());
  const int64_t n = int64_t(files.size());
  Element columns{Component(std::move(files))};
  Dataset ds(std::make_shared<ListFilesNode>(std::move(columns), n, "list_files(" + pattern + ")"));
  if (!options.shuffle) return ds;
  return ds.shuffle(
      n, {.seed = options.seed ? *options.seed : draw_seed("list_files (ListFilesOptions::seed)")});
}

Dataset Dataset::from_generator(std::function<Generator()> factory, GeneratorOptions options) {
  LS_CHECK(factory, "from_generator: empty factory function");
  return Dataset(std::make_shared<GeneratorNode>(std::move(factory), std::move(options)));
}

Dataset Dataset::zip(std::vector<Dataset> datasets) {
  LS_CHECK(!datasets.empty(), "zip: no datasets given");
  std::vector<NodePtr> nodes;
  for (auto& d : datasets) {
    d.node();
    nodes.push_back(d.node_);
  }
  return datasets[0].wrap(std::make_shared<ZipNode>(std::move(nodes)));
}

}  // namespace lockstep::data
