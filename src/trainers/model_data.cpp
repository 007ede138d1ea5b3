// ModelData and Prediction (lockstep/trainers/model_data.h).
#include "lockstep/trainers/model_data.h"

#include "lockstep/distribute/strategy.h"

namespace lockstep {

ModelData::ModelData(Tensor array) : kind_(Kind::array), arrays_{std::move(array)} {}
ModelData::ModelData(std::vector<Tensor> arrays) : kind_(Kind::list), arrays_(std::move(arrays)) {}
ModelData::ModelData(std::initializer_list<Tensor> arrays) : kind_(Kind::list), arrays_(arrays) {}
ModelData::ModelData(TensorDict dict) : kind_(Kind::dict), dict_(std::move(dict)) {}
ModelData::ModelData(std::map<std::string, Tensor> dict)
    : kind_(Kind::dict), dict_(std::move(dict)) {}
ModelData::ModelData(std::initializer_list<std::pair<const std::string, Tensor>> dict)
    : kind_(Kind::dict), dict_(dict) {}
ModelData::ModelData(data::Dataset dataset) : kind_(Kind::dataset), dataset_(std::move(dataset)) {}
ModelData::ModelData(const distribute::DistributedDataset& dataset)
    : kind_(Kind::distributed_dataset), dataset_(dataset.dataset()) {}

std::string ModelData::describe() const {
  switch (kind_) {
    case Kind::none:
      return "empty";
    case Kind::array:
      return "one array";
    case Kind::list:
      return "a list of " + std::to_string(arrays_.size()) + " arrays";
    case Kind::dict:
      return "a dict of " + std::to_string(dict_.tensors.size()) + " arrays";
    case Kind::dataset:
      return "a Dataset";
    case Kind::distributed_dataset:
      return "a DistributedDataset";
  }
  return "?";
}

Prediction::Prediction(std::vector<Tensor> outputs, std::vector<std::string> output_names)
    : outputs_(std::move(outputs)), names_(std::move(output_names)) {
  if (outputs_.size() == 1) Tensor::operator=(outputs_[0]);
}

Prediction::operator std::map<std::string, Tensor>() const {
  std::map<std::string, Tensor> keyed;
  for (size_t o = 0; o < outputs_.size() && o < names_.size(); ++o) keyed[names_[o]] = outputs_[o];
  return keyed;
}

}  // namespace lockstep
