// --resume with 2 threads: the continued run equals the uninterrupted one bit for bit, on a model
// large enough for the kernels to split their work between the threads. (1 thread, with the loss
// curve and a kill -9: test_cli.cpp, test_faults.cpp.)
#include <doctest/doctest.h>

#include <string>

#include "io/safetensors.hpp"
#include "tests/apps/cli_test_util.hpp"
#include "tests/test_files.hpp"

using namespace tg;
using namespace tg::testing::cli;

TEST_CASE("cli.resume_with_2_threads_is_bit_identical") {
  if (!have_cli()) return;
  // 64 pairs of 4 + 4 tokens per batch: the feed-forward products are 256 x 64 x 256 (4M
  // multiply-adds), above the size from which a GEMM is split between threads.
  const std::string common =
      "train --data " + tiny_data() +
      " --d-model 64 --heads 2 --enc-layers 1 --dec-layers 1 --d-ff 256 --batch-size 64"
      " --warmup 5 --log-every 1 --eval-every 3 --json --dropout 0.2 --seed 7 --steps ";
  const std::string full = testing::scratch("t2_full.safetensors"),
                    part = testing::scratch("t2_part.safetensors"),
                    one = testing::scratch("t1_full.safetensors");
  REQUIRE(translate(common + "6 --threads 2 --out " + full).status == 0);
  REQUIRE(translate(common + "3 --threads 2 --out " + part).status == 0);
  const Run resumed = translate(common + "6 --threads 2 --resume --out " + part);
  INFO("stderr: ", resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(losses(resumed.out).front().first == 4);
  const io::TensorFile a = io::read_safetensors(testing::scratch("t2_full.last.safetensors"));
  const io::TensorFile b = io::read_safetensors(testing::scratch("t2_part.last.safetensors"));
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    INFO(a.tensors[i].first);
    CHECK(a.tensors[i].second.to_vector() == b.tensors[i].second.to_vector());
  }
  // The 2 threads did split the work: one thread sums in another order and ends elsewhere.
  REQUIRE(translate(common + "6 --threads 1 --out " + one).status == 0);
  CHECK(testing::read_bytes(testing::scratch("t1_full.last.safetensors")) !=
        testing::read_bytes(testing::scratch("t2_full.last.safetensors")));
}
