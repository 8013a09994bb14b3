// libFuzzer harness for the C++ decoder, built with AddressSanitizer and
// UBSan by tests/test_fuzz_cpp.py: any byte string must decode or fail
// cleanly, without reading a byte outside the input.
#include <cstdlib>
#include <vector>

#include "rt/protocol/describe.h"
#include "rt/protocol/encode.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size heap copy, so ASan catches a read even one byte past the end.
  std::vector<uint8_t> frame(data, data + size);
  const rt::DecodeResult r = rt::decode(rt::ByteSpan(frame.data(), frame.size()));
  if (!r.ok()) {
    check(r.error.field != nullptr);
    check(r.error.offset <= size);
    check(!rt::describe(r.error).empty());
  } else {
    const rt::FrameView& f = r.frame;
    check(f.end <= size && f.icrc + rt::kIcrcBytes == f.end);
    check(f.payload + f.payload_len + f.pad == f.icrc);
    (void)rt::icrc_compute(f);
    // Re-encoding what was decoded must succeed and decode again.
    const rt::FrameSpec spec = rt::spec_from_frame(f);
    std::vector<uint8_t> out(rt::encoded_size(spec, f.payload_len));
    const rt::EncodeResult e = rt::encode(spec, rt::ByteSpan(f.base + f.payload, f.payload_len),
                                          rt::MutByteSpan(out.data(), out.size()));
    check(e.ok());
    check(rt::decode(rt::ByteSpan(out.data(), e.len)).ok());
  }
  const rt::DecodeResult t = rt::decode_transport(rt::ByteSpan(frame.data(), frame.size()));
  check(t.ok() || t.error.offset <= size);
  return 0;
}
