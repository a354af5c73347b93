#include <doctest/doctest.h>
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <string>

#include "io/safetensors.hpp"
#include "tests/test_files.hpp"

using namespace tg;
using namespace tg::nn;
using namespace tg::io;
using tg::testing::safetensors_bytes;

namespace {

// The SafetensorsError message for these file bytes ("" if they load).
std::string load_error(const std::string& bytes) {
  try {
    parse_safetensors({reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()},
                      "bad.safetensors");
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "";
}

std::string f32_bytes(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

#define CHECK_ERROR(bytes, text)                              \
  do {                                                        \
    const std::string msg_ = load_error(bytes);               \
    INFO("message: ", msg_);                                  \
    CHECK(msg_.find("bad.safetensors") != std::string::npos); \
    CHECK(msg_.find(text) != std::string::npos);              \
  } while (0)

const std::string kTwo = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";

}  // namespace

TEST_CASE("safetensors.round_trip") {
  Generator gen(1);
  NamedTensors tensors = {{"w", Tensor::normal({3, 5}, 0.f, 1.f, gen)},
                          {"layer.0.bias", Tensor::normal({7}, 0.f, 1.f, gen)},
                          {"scalar", Tensor::scalar(4.5f)},
                          {"empty", Tensor::zeros({0, 3})}};
  const Metadata md = {{"format", "pt"}, {"vocab", "[\"<pad>\",\"é\"]"}, {"empty", ""}};
  const std::string path = testing::scratch("round_trip.safetensors");
  write_safetensors(path, tensors, md);
  const TensorFile f = read_safetensors(path);
  CHECK(f.metadata == md);
  REQUIRE(f.tensors.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    const Tensor* got = f.find(name);
    REQUIRE_MESSAGE(got, name);
    CHECK(got->shape() == t.shape());
    CHECK(got->to_vector() == t.to_vector());
  }
  // Data starts 8-byte aligned, as the reference writer does.
  const std::string bytes = testing::read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK((8 + n) % 8 == 0);
}

TEST_CASE("safetensors.valid_minimal_files") {
  CHECK(load_error(safetensors_bytes("{}", "")).empty());
  CHECK(load_error(safetensors_bytes(kTwo, f32_bytes({1, 2, 3}))).empty());
  CHECK(load_error(safetensors_bytes(kTwo + "    ", f32_bytes({1, 2, 3}))).empty());  // space padding
  // two zero-size tensors at the same offset (as in the reference implementation)
  CHECK(load_error(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                                     R"("b":{"dtype":"F32","shape":[2,0],"data_offsets":[0,0]}})",
                                     ""))
            .empty());
}

TEST_CASE("safetensors.other_dtypes_convert_to_f32") {
  // F16 1.0 = 0x3C00, -2.0 = 0xC000, smallest subnormal 2^-24 = 0x0001; BF16 1.5 = 0x3FC0; F64 0.25.
  const unsigned char f16[] = {0x00, 0x3C, 0x00, 0xC0, 0x01, 0x00};
  const unsigned char bf16[] = {0xC0, 0x3F};
  const double f64 = 0.25;
  std::string data(reinterpret_cast<const char*>(f16), 6);
  data.append(reinterpret_cast<const char*>(bf16), 2);
  data.append(reinterpret_cast<const char*>(&f64), 8);
  const std::string header = R"({"h":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},)"
                             R"("b":{"dtype":"BF16","shape":[],"data_offsets":[6,8]},)"
                             R"("d":{"dtype":"F64","shape":[1,1],"data_offsets":[8,16]}})";
  const std::string bytes = safetensors_bytes(header, data);
  const TensorFile f =
      parse_safetensors({reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()}, "x");
  CHECK(f.find("h")->to_vector() == std::vector<float>{1.0f, -2.0f, 0x1.0p-24f});
  CHECK(f.find("b")->item() == 1.5f);
  CHECK(f.find("d")->shape() == Shape{1, 1});
  CHECK(f.find("d")->item() == 0.25f);
}

TEST_CASE("safetensors.rejects.short_file_and_header_length") {
  CHECK_ERROR(std::string("\x02\0\0", 3), "too short");
  CHECK_ERROR(std::string(), "file is 0 bytes");
  CHECK_ERROR(std::string(7, '\0'), "7 bytes, too short");
  std::string huge(8, '\0');
  const uint64_t big = 200'000'000;
  std::memcpy(huge.data(), &big, 8);
  CHECK_ERROR(huge + "{}", "over the 100000000-byte limit");
  std::string past(8, '\0');
  const uint64_t n = 50;
  std::memcpy(past.data(), &n, 8);
  CHECK_ERROR(past + "{}", "exceeds the file size");
  const uint64_t one_past = 3;  // "{}" is 2 bytes
  std::memcpy(past.data(), &one_past, 8);
  CHECK_ERROR(past + "{}", "exceeds the file size");
  const uint64_t max = ~uint64_t{0};
  std::memcpy(past.data(), &max, 8);
  CHECK_ERROR(past + "{}", "over the 100000000-byte limit");
  // Another kind of file: its first 8 bytes make a nonsense length, and byte 8 does not open a
  // JSON object, so the message says what the file is not.
  CHECK_ERROR("This program is free software\n", "this is not a safetensors file");
  CHECK_ERROR(past + "x}", "this is not a safetensors file");
  std::memcpy(past.data(), &n, 8);
  CHECK_ERROR(past + "[]",
              "exceeds the file size (2 bytes after the length); this is not a safetensors file");
  CHECK(load_error(huge + "{}").find("not a safetensors") == std::string::npos);  // '{': a broken one
}

TEST_CASE("safetensors.rejects.bad_header_json") {
  CHECK_ERROR(safetensors_bytes("{\"a\":\xff}", ""), "not valid UTF-8");
  CHECK_ERROR(safetensors_bytes("{\"a\":", ""), "invalid JSON");
  CHECK_ERROR(safetensors_bytes("[1,2]", ""), "header must be a JSON object, got array");
  CHECK_ERROR(safetensors_bytes("\"x\"", ""), "header must be a JSON object, got string");
  // nothing but spaces, text after the object, a NUL inside a key, a non-string key
  CHECK_ERROR(safetensors_bytes("        ", ""), "bad.safetensors: header");
  CHECK_ERROR(safetensors_bytes("{} x", ""), "bad.safetensors: header");
  CHECK_ERROR(safetensors_bytes(std::string("{\"a\0\":1}", 8), ""), "bad.safetensors: header");
  CHECK_ERROR(safetensors_bytes("{1:2}", ""), "bad.safetensors: header");
  CHECK_ERROR(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                f32_bytes({1, 2})),
              "duplicate key \"a\"");
  // Nothing nests deeper than the schema (header, tensor, shape): a deeper bracket is refused where it is.
  CHECK_ERROR(safetensors_bytes(std::string(20, '[') + std::string(20, ']'), ""),
              "header must be a JSON object, got array");
  CHECK_ERROR(
      safetensors_bytes(R"({"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", f32_bytes({1})),
      "tensor \"a\" shape dimension: json: expected an integer, got array");
  CHECK_ERROR(safetensors_bytes(R"({"__metadata__":{"k":"v","j":["v"]}})", ""),
              "__metadata__ value of \"j\" must be a string, got array");
  CHECK_ERROR(safetensors_bytes("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}", ""),
              "header: invalid JSON: duplicate key \"dtype\" at byte 26");
  CHECK_ERROR(safetensors_bytes(R"({"__metadata__":{"k":"v","k":"w"}})", ""),
              "duplicate key \"k\" at byte 27");
  CHECK_ERROR(safetensors_bytes(R"({"__metadata__":{},"__metadata__":{}})", ""),
              "duplicate key \"__metadata__\"");
  CHECK_ERROR(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4)", f32_bytes({1})),
              "header: invalid JSON: syntax error while parsing array - unexpected end of input; expected "
              "']' at byte 51");
}

TEST_CASE("safetensors.rejects.bad_entries") {
  CHECK_ERROR(
      safetensors_bytes(R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0')),
      "unsupported dtype \"I64\"");
  CHECK_ERROR(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", f32_bytes({1})),
              "shape dimension is negative");
  CHECK_ERROR(
      safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", f32_bytes({1})),
      "not an integer");
  CHECK_ERROR(
      safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
                        f32_bytes({1})),
      "overflows");
  CHECK_ERROR(
      safetensors_bytes(R"({"a":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,4]}})",
                        f32_bytes({1})),
      "integer 99999999999999999999 is out of the 64-bit range at byte 29");
  CHECK_ERROR(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,9223372036854775808]}})",
                                f32_bytes({1})),
              "tensor \"a\" data_offsets end: json: integer 9223372036854775808 out of the int64 range");
  CHECK_ERROR(
      safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4e0]}})", f32_bytes({1})),
      "data_offsets end: json: 4.0 is not an integer");
  CHECK_ERROR(
      safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", f32_bytes({1})),
      "data_offsets must be [begin, end]");
  CHECK_ERROR(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", f32_bytes({1})),
              "data_offsets must be [begin, end]");
  CHECK_ERROR(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":{}}})", f32_bytes({1})),
              "data_offsets must be [begin, end]");
  CHECK_ERROR(
      safetensors_bytes(R"({"a":{"dtype":["F32"],"shape":[1],"data_offsets":[0,4]}})", f32_bytes({1})),
      "dtype must be a string");
  CHECK_ERROR(safetensors_bytes(R"({"a":{"dtype":4,"shape":[],"data_offsets":[0,4]}})", f32_bytes({1})),
              "dtype must be a string");
  CHECK_ERROR(safetensors_bytes(R"({"a":{"dtype":"f32","shape":[],"data_offsets":[0,4]}})", f32_bytes({1})),
              "unsupported dtype \"f32\"");  // names are upper case
  CHECK_ERROR(safetensors_bytes(R"({"a":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})", f32_bytes({1})),
              "shape must be an array");
  CHECK_ERROR(safetensors_bytes(R"({"a":"x"})", ""), "tensor \"a\": expected an object, got string");
  CHECK_ERROR(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", f32_bytes({1})),
              "shape [2] x F32 needs 8");
  CHECK_ERROR(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", f32_bytes({1})),
              "end before begin");
  CHECK_ERROR(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1]}})", f32_bytes({1})),
              "needs dtype, shape");
  CHECK_ERROR(
      safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", f32_bytes({1})),
      "unknown field \"x\"");
  CHECK_ERROR(safetensors_bytes(R"({"a":[1]})", ""), "tensor \"a\": expected an object");
  CHECK_ERROR(safetensors_bytes(R"({"":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})", ""),
              "empty name");
}

TEST_CASE("safetensors.rejects.offsets") {
  CHECK_ERROR(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", f32_bytes({1})),
              "data_offsets begin is negative");
  // out of range: claims bytes past the end of the file
  CHECK_ERROR(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f32_bytes({1})),
              "out of range");
  // overlapping
  CHECK_ERROR(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                f32_bytes({1, 2})),
              "overlap");
  // a hole between tensors, and one at the start
  CHECK_ERROR(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                f32_bytes({1, 2, 3})),
              "hole of 4 bytes");
  CHECK_ERROR(
      safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", f32_bytes({1, 2})),
      "hole of 4 bytes");
  // trailing bytes nobody claims
  CHECK_ERROR(safetensors_bytes(kTwo, f32_bytes({1, 2, 3, 4})), "4 trailing bytes");
}

TEST_CASE("safetensors.rejects.metadata") {
  CHECK_ERROR(safetensors_bytes(R"({"__metadata__":{"k":1}})", ""),
              "__metadata__ value of \"k\" must be a string");
  CHECK_ERROR(safetensors_bytes(R"({"__metadata__":"x"})", ""), "__metadata__ must be an object");
  CHECK_ERROR(safetensors_bytes(R"({"__metadata__":{"k":{"x":"y"}}})", ""), "must be a string, got object");
}

TEST_CASE("safetensors.rejects.every_truncation") {
  // Every prefix of a valid file is an error, never a crash or a partial load.
  Generator gen(3);
  const std::string good = serialize_safetensors(
      {{"a", Tensor::normal({3}, 0.f, 1.f, gen)}, {"b", Tensor::normal({2, 2}, 0.f, 1.f, gen)}},
      {{"k", "v"}});
  CHECK(load_error(good).empty());
  for (size_t len = 0; len < good.size(); ++len) {
    INFO("prefix of ", len, " bytes");
    CHECK_FALSE(load_error(good.substr(0, len)).empty());
  }
}

TEST_CASE("safetensors.read.missing_file_and_directory") {
  CHECK_THROWS_WITH_AS(read_safetensors(testing::scratch("does_not_exist.safetensors")),
                       doctest::Contains("does_not_exist.safetensors: cannot open"), SafetensorsError);
  CHECK_THROWS_WITH_AS(read_safetensors(testing::scratch_dir().string()), doctest::Contains("is a directory"),
                       SafetensorsError);
}

TEST_CASE("safetensors.write.rejects_bad_names") {
  CHECK_THROWS_WITH(serialize_safetensors({{"a", Tensor::scalar(1)}, {"a", Tensor::scalar(2)}}),
                    doctest::Contains("duplicate tensor name \"a\""));
  CHECK_THROWS_WITH(serialize_safetensors({{"__metadata__", Tensor::scalar(1)}}),
                    doctest::Contains("invalid tensor name"));
}

TEST_CASE("safetensors.write.atomic_failure_keeps_previous_file") {
  const std::string path = testing::scratch("atomic.safetensors");
  write_safetensors(path, {{"old", Tensor::full({4}, 1.f)}});
  const std::string before = testing::read_bytes(path);

  // A file-size limit makes the write of a large tensor fail half-way (EFBIG instead of SIGXFSZ).
  rlimit old{};
  getrlimit(RLIMIT_FSIZE, &old);
  auto prev_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 4096;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  std::string msg;
  try {
    write_safetensors(path, {{"new", Tensor::zeros({100000})}});
  } catch (const std::runtime_error& e) {
    msg = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, prev_handler);

  INFO("message: ", msg);
  CHECK(msg.find("atomic.safetensors") != std::string::npos);
  CHECK(msg.find("write failed") != std::string::npos);
  CHECK(testing::read_bytes(path) == before);
  // No temporary left behind.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(testing::scratch_dir()))
    files += e.path().filename().string().find("atomic.safetensors") != std::string::npos;
  CHECK(files == 1);

  CHECK_THROWS_WITH(write_safetensors(testing::scratch("no/such/dir/x.safetensors"), {}),
                    doctest::Contains("no/such/dir/x.safetensors"));
}

TEST_CASE("safetensors.rejects.random_corruption_never_crashes") {
  // Flip random bytes of a valid file (mostly in the header, where the structure is): every
  // result either loads or throws SafetensorsError; under ASan this also checks no read goes wild.
  Generator gen(11);
  const std::string good = serialize_safetensors(
      {{"a", Tensor::normal({2, 3}, 0.f, 1.f, gen)}, {"b", Tensor::normal({4}, 0.f, 1.f, gen)}},
      {{"k", "v"}});
  uint64_t header = 0;
  std::memcpy(&header, good.data(), 8);
  int loaded = 0, rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bad = good;
    const int flips = 1 + static_cast<int>(gen.below(3));
    for (int f = 0; f < flips; ++f) {
      const size_t at = gen.below(4) == 0 ? gen.below(bad.size()) : gen.below(8 + header);
      bad[at] = static_cast<char>(gen.below(256));
    }
    try {
      parse_safetensors({reinterpret_cast<const unsigned char*>(bad.data()), bad.size()}, "fuzz");
      ++loaded;
    } catch (const SafetensorsError&) {
      ++rejected;
    }
  }
  // Any other exception would have ended the test. Both outcomes occur (a flip in the data loads).
  CHECK(loaded > 0);
  CHECK(rejected > 1000);
}

// ---- hostile headers: each refused (or loaded) with the right message, in linear time ------------
// The sizes would have caught the old quadratic parser by their run time (160,000 keys took 37 s),
// and the timeout fails the case outright if anything quadratic comes back; the linear loader
// needs well under a second for each in a release build (bench/bench_load.cpp measures it).

TEST_CASE("safetensors.hostile.many_keys" * doctest::timeout(30)) {
  std::string header = "{\"__metadata__\":{";
  for (int i = 0; i < 160'000; ++i) header += (i ? ",\"key" : "\"key") + std::to_string(i) + "\":\"v\"";
  CHECK(header.size() > 2'000'000);
  const std::string good = safetensors_bytes(header + "}}", "");
  const TensorFile f =
      parse_safetensors({reinterpret_cast<const unsigned char*>(good.data()), good.size()}, "x");
  CHECK(f.metadata.size() == 160'000);
  CHECK(f.metadata.at("key159999") == "v");
  // One key repeated at the very end: found without comparing every pair.
  CHECK_ERROR(safetensors_bytes(header + ",\"key5\":\"w\"}}", ""), "duplicate key \"key5\"");
}

TEST_CASE("safetensors.hostile.many_tensors" * doctest::timeout(30)) {
  std::string header = "{";
  for (int i = 0; i < 160'000; ++i)
    header += "\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},";
  CHECK(header.size() > 8'000'000);
  const std::string last = "\"last\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  const std::string good = safetensors_bytes(header + last, f32_bytes({3, 3}));
  const TensorFile f =
      parse_safetensors({reinterpret_cast<const unsigned char*>(good.data()), good.size()}, "x");
  REQUIRE(f.tensors.size() == 160'001);
  CHECK(f.tensors.back().second.to_vector() == std::vector<float>{3.f, 3.f});
  CHECK_ERROR(
      safetensors_bytes(header + "\"t77\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}," + last,
                        f32_bytes({3, 3})),
      "duplicate key \"t77\" (two tensors of that name)");
}

TEST_CASE("safetensors.hostile.deep_nesting" * doctest::timeout(30)) {
  // A million open brackets anywhere: refused at the first one the schema does not allow.
  const std::string bomb(1'000'000, '[');
  CHECK_ERROR(safetensors_bytes(bomb, ""), "header must be a JSON object, got array");
  CHECK_ERROR(safetensors_bytes("{\"a\":" + bomb, ""), "tensor \"a\": expected an object, got array");
  CHECK_ERROR(safetensors_bytes("{\"a\":{\"shape\":[" + bomb, ""),
              "shape dimension: json: expected an integer, got array");
  CHECK_ERROR(safetensors_bytes("{\"__metadata__\":{\"k\":" + bomb, ""),
              "__metadata__ value of \"k\" must be a string, got array");
  CHECK_ERROR(safetensors_bytes("{\"a\":{\"dtype\":{\"x\":" + bomb, ""), "dtype must be a string");
}

TEST_CASE("safetensors.hostile.huge_strings" * doctest::timeout(30)) {
  const std::string big(8'000'000, 'x');
  // An 8 MB metadata value and an 8 MB tensor name are valid.
  std::string bytes = serialize_safetensors({{big, Tensor::full({1}, 2.f)}}, {{"k", big}});
  TensorFile f = parse_safetensors({reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()}, "x");
  CHECK(f.metadata.at("k") == big);
  CHECK(f.tensors.at(0).first == big);
  // Unterminated, or with a control character at its end: the message names both ends, not all of it.
  const std::string msg = load_error(safetensors_bytes("{\"__metadata__\":{\"k\":\"" + big, ""));
  CHECK(msg.find("missing closing quote") != std::string::npos);
  CHECK(msg.find("(8000001 bytes)") != std::string::npos);
  CHECK(msg.size() < 400);
  const std::string ctl = load_error(safetensors_bytes("{\"" + big + "\n\":1}", ""));
  CHECK(ctl.find("control character U+000A (LF)") != std::string::npos);
  CHECK(ctl.find("at byte 8000002") != std::string::npos);
  CHECK(ctl.size() < 400);
  // Invalid UTF-8 at the end of a long string: found, with its offset.
  CHECK_ERROR(safetensors_bytes("{\"__metadata__\":{\"k\":\"" + big + "\xc3\"}}", ""),
              "not valid UTF-8 at byte 8000022");
}

TEST_CASE("safetensors.hostile.long_shapes" * doctest::timeout(30)) {
  // A million dimensions of 1 is one element: loaded. Of 2, it overflows, and the message shows
  // eight of them.
  std::string ones, twos;
  for (int i = 0; i < 1'000'000; ++i) {
    ones += i ? ",1" : "1";
    twos += i ? ",2" : "2";
  }
  const std::string bytes = safetensors_bytes(
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[" + ones + "],\"data_offsets\":[0,4]}}", f32_bytes({5}));
  const TensorFile f =
      parse_safetensors({reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()}, "x");
  CHECK(f.tensors.at(0).second.shape().size() == 1'000'000);
  CHECK(f.tensors.at(0).second.item() == 5.f);
  const std::string msg = load_error(
      safetensors_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[" + twos + "],\"data_offsets\":[0,4]}}", ""));
  CHECK(msg.find("shape [2, 2, 2, 2, 2, 2, 2, 2, ... (1000000 dimensions)] overflows") != std::string::npos);
  CHECK(msg.size() < 300);
}

TEST_CASE("safetensors.hostile.million_digit_numbers" * doctest::timeout(30)) {
  const std::string digits(1'000'000, '9');
  auto entry = [](const std::string& shape, const std::string& offsets) {
    return "{\"a\":{\"dtype\":\"F32\",\"shape\":[" + shape + "],\"data_offsets\":[" + offsets + "]}}";
  };
  std::string msg = load_error(safetensors_bytes(entry(digits, "0,4"), f32_bytes({1})));
  CHECK(msg.find("integer 999999999999999999999999...(1000000 bytes)...") != std::string::npos);
  CHECK(msg.find("is out of the 64-bit range at byte 29") != std::string::npos);
  CHECK(msg.size() < 300);
  msg = load_error(safetensors_bytes(entry("1", "0,4." + std::string(1'000'000, '0')), f32_bytes({1})));
  CHECK(msg.find("data_offsets end: json: 4.0 is not an integer") != std::string::npos);
  msg = load_error(safetensors_bytes(entry("1", "0,1e" + digits), f32_bytes({1})));
  CHECK(msg.find("number overflow parsing '1e999") != std::string::npos);
  CHECK(msg.find("...(1000002 bytes)...999") != std::string::npos);
  CHECK(msg.size() < 300);
  msg = load_error(safetensors_bytes(entry("1", "0,-" + digits), f32_bytes({1})));
  CHECK(msg.find("is out of the 64-bit range") != std::string::npos);
}

#undef CHECK_ERROR  // unity builds: the next file of the chunk must not see it
