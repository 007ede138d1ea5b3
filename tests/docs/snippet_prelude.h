// What the docs' code fragments may take for granted (tests/docs/check_snippets.py compiles
// each fragment after this header): the public headers, `ls` for lockstep, the layers' names,
// and declarations (never definitions: the fragments are only compiled, not run) of the data
// and models a guide's prose has already introduced.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "lockstep/distribute/strategy.h"
#include "lockstep/distribute/xla_strategy.h"
#include "lockstep/io/checkpoint.h"
#include "lockstep/lockstep.h"
#include "lockstep/saving/checkpoint.h"
#include "lockstep/tools/export.h"

namespace ls = lockstep;
namespace dist = lockstep::distribute;
using namespace lockstep::layers;

namespace docs_context {
extern ls::Model model;                                    // a compiled model
extern ls::Tensor x, y, x_train, y_train, x_test, y_test;  // arrays: inputs and labels
extern ls::data::ImageDataset train, val;                  // image_dataset_from_directory's
extern ls::data::Dataset dataset;                          // any batched {x, y} pipeline
}  // namespace docs_context
using namespace docs_context;
