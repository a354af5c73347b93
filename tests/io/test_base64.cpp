// io/base64.*: the test vectors of RFC 4648, every byte value, and the inputs a strict decoder refuses.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "io/base64.hpp"
#include "tests/test_util.hpp"

using tg::testing::error_of;

TEST_CASE("base64.rfc4648_and_strict_decoding") {
  using tg::io::base64_decode;
  using tg::io::base64_encode;
  // RFC 4648 section 10.
  const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, coded] : vectors) {
    CHECK(base64_encode(plain) == coded);
    CHECK(base64_decode(coded) == plain);
  }
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n = 0; n <= all.size(); n += 37)
    CHECK(base64_decode(base64_encode(all.substr(0, n))) == all.substr(0, n));
  CHECK(base64_encode("\xFB\xFF") == "+/8=");
  for (const char* bad : {"Zg=", "Zg", "Z===", "Zm9v\n", "Zm 9", "Zh==", "Zm9=", "=Zm9", "Zg==Zg==", "Zm-_"})
    CHECK_THROWS_AS(base64_decode(bad), std::invalid_argument);
  CHECK(error_of([] { base64_decode("Zm9vY*Fy"); }) == "base64: offset 5: byte 0x2a is not a base64 digit");
}
