// The table through which Model's save methods reach saving (internal/model_files.h).
#include "trainers/internal/model_files.h"

namespace lockstep {

ModelFiles& model_files() {
  static ModelFiles files;
  return files;
}

}  // namespace lockstep
