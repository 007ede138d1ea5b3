// Reading the rendezvous store's requests (see store_protocol.h).
#include "distribute/store_protocol.h"

#include "lockstep/distribute/store.h"

namespace lockstep::distribute::store_protocol {

bool read_request(uint8_t op, Reader& in, Request& request) {
  request.op = op;
  switch (op) {
    case kSet:
      request.key = in.str(kStoreMaxKeyBytes);
      request.value = in.bytes(kStoreMaxValueBytes);
      break;
    case kGet:
      request.key = in.str(kStoreMaxKeyBytes);
      request.timeout = in.wait_ms();
      break;
    case kAdd:
      request.key = in.str(kStoreMaxKeyBytes);
      request.delta = in.pod<int64_t>();
      break;
    case kCheck:
      request.key = in.str(kStoreMaxKeyBytes);
      break;
    case kWait: {
      const uint32_t n = in.pod<uint32_t>();
      if (n > kStoreMaxWaitKeys) return false;
      for (uint32_t i = 0; i < n && in.ok; ++i) request.keys.push_back(in.str(kStoreMaxKeyBytes));
      request.timeout = in.wait_ms();
      break;
    }
    case kRegister:
      request.rank = in.pod<int32_t>();
      break;
    case kLost:
      request.timeout = in.wait_ms();
      break;
    case kBye:
      break;
    case kHello:
      request.token = in.str(kStoreMaxTokenBytes);
      break;
    default:
      return false;  // unknown op
  }
  return in.ok;
}

}  // namespace lockstep::distribute::store_protocol
