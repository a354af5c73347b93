// Parity with PyTorch: the same weights and padded batch through our Transformer and through
// nn.Embedding + sinusoidal positions + nn.Transformer(batch_first=True) + nn.Linear
// (tests/nn/torch_parity.py, run with /usr/bin/python3, which has Debian's python3-torch, or
// TAPEGRAD_TEST_PYTHON). SKIPPED when torch is not importable; CI requires it to run.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "autograd/tape.hpp"
#include "nn/loss.hpp"
#include "nn/transformer.hpp"
#include "nn_test_util.hpp"
#include "tests/python.hpp"
#include "tests/skip.hpp"

using namespace tg;
using namespace tg::nn;
namespace fs = std::filesystem;

namespace {

template <class T>
void write_ids(std::ofstream& f, const char* name, const std::vector<T>& ids) {
  f << name;
  for (T v : ids) f << ' ' << v;
  f << '\n';
}

void run_parity(bool norm_first, const std::string& activation) {
  TransformerConfig c = test::tiny_config(norm_first, activation);
  c.d_model = 16;
  c.heads = 4;
  c.d_ff = 32;
  const float smoothing = 0.1f;
  Transformer m(c, 21);
  Generator g(22);
  for (auto& [n, p] : m.named_parameters())  // make biases and norms non-trivial
    if (n.find("bias") != std::string::npos || n.find("norm") != std::string::npos) {
      Tensor t = p;
      const bool w = n.find("weight") != std::string::npos;
      uniform_(t, w ? 0.5f : -0.3f, w ? 1.5f : 0.3f, g);
    }
  const Batch b = test::padded_batch(4, 7, 6, 13, 11, 23);

  const fs::path dir = fs::temp_directory_path() / fmt::format("tapegrad_parity_{}", ::getpid());
  fs::create_directories(dir);
  const fs::path in = dir / "model.txt", out = dir / "torch.txt";
  {
    std::ofstream f(in);
    f << fmt::format("config {} {} {} {} {} {} {} {} {} {:.9g}\n", c.src_vocab, c.tgt_vocab, c.d_model,
                     c.heads, c.enc_layers, c.dec_layers, c.d_ff, c.norm_first ? 1 : 0, c.activation,
                     smoothing);
    f << fmt::format("batch {} {} {}\n", b.batch, b.src_len, b.tgt_len);
    write_ids(f, "src", b.src);
    write_ids(f, "tgt_in", b.tgt_in);
    write_ids(f, "labels", b.labels);
    for (auto& [n, p] : m.named_parameters()) {
      f << "param " << n << ' ' << p.dim();
      for (int64_t s : p.shape()) f << ' ' << s;
      for (int64_t i = 0; i < p.numel(); ++i) f << fmt::format(" {:.9g}", p.data()[i]);
      f << '\n';
    }
  }
  const std::string cmd = fmt::format("{} {}/tests/nn/torch_parity.py {} {}", testing::python(),
                                      TG_SOURCE_DIR, in.string(), out.string());
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "failed: " << cmd);

  const test::TorchReference torch = test::read_torch_reference(out.string());
  fs::remove_all(dir);

  m.zero_grad();
  const Tensor loss = label_smoothed_cross_entropy(m.forward(b), b.labels, smoothing);
  backward(loss);
  const double ours = loss.item();
  const double loss_rel = std::abs(ours - torch.loss) / std::abs(torch.loss);
  MESSAGE(fmt::format("torch {} norm_first={} {}: loss ours {:.8f} torch {:.8f} (rel {:.2e})", torch.version,
                      norm_first, activation, ours, torch.loss, loss_rel));
  CHECK(loss_rel <= 1e-5);

  const auto [worst_name, worst] = test::worst_gradient(m.named_parameters(), torch);
  CHECK(worst <= 1e-3);
  MESSAGE(fmt::format("worst parameter gradient: {} (rel {:.2e})", worst_name, worst));
}

}  // namespace

TEST_CASE("nn.parity.torch") {
  if (!testing::python_can_import("torch")) TG_SKIP(testing::python_lacks("torch", "python3-torch"));
  SUBCASE("post-norm relu") {
    run_parity(false, "relu");
  }
  SUBCASE("pre-norm relu") {
    run_parity(true, "relu");
  }
  SUBCASE("post-norm gelu") {
    run_parity(false, "gelu");
  }
}
