#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "autograd/functions.hpp"
#include "nn/layers.hpp"
#include "nn/transformer.hpp"
#include "nn_test_util.hpp"

using namespace tg;
using namespace tg::nn;

TEST_CASE("nn.module.parameter_names_match_pytorch") {
  TransformerConfig c = test::tiny_config();
  c.enc_layers = 1;
  c.dec_layers = 1;
  Transformer m(c, 1);
  const int64_t d = c.d_model, ff = c.d_ff;
  // nn.Transformer's state_dict order and shapes (with our embeddings and generator around it).
  std::vector<std::pair<std::string, Shape>> expected = {{"src_embed.weight", {c.src_vocab, d}},
                                                         {"tgt_embed.weight", {c.tgt_vocab, d}}};
  auto attn = [&](const std::string& p) {
    expected.push_back({p + ".in_proj_weight", {3 * d, d}});
    expected.push_back({p + ".in_proj_bias", {3 * d}});
    expected.push_back({p + ".out_proj.weight", {d, d}});
    expected.push_back({p + ".out_proj.bias", {d}});
  };
  auto ffn = [&](const std::string& p) {
    expected.push_back({p + ".linear1.weight", {ff, d}});
    expected.push_back({p + ".linear1.bias", {ff}});
    expected.push_back({p + ".linear2.weight", {d, ff}});
    expected.push_back({p + ".linear2.bias", {d}});
  };
  auto norm = [&](const std::string& p) {
    expected.push_back({p + ".weight", {d}});
    expected.push_back({p + ".bias", {d}});
  };
  attn("transformer.encoder.layers.0.self_attn");
  ffn("transformer.encoder.layers.0");
  norm("transformer.encoder.layers.0.norm1");
  norm("transformer.encoder.layers.0.norm2");
  norm("transformer.encoder.norm");
  attn("transformer.decoder.layers.0.self_attn");
  attn("transformer.decoder.layers.0.multihead_attn");
  ffn("transformer.decoder.layers.0");
  for (auto n : {"norm1", "norm2", "norm3"}) norm(std::string("transformer.decoder.layers.0.") + n);
  norm("transformer.decoder.norm");
  expected.push_back({"generator.weight", {c.tgt_vocab, d}});
  expected.push_back({"generator.bias", {c.tgt_vocab}});

  const NamedTensors params = m.named_parameters();
  REQUIRE(params.size() == expected.size());
  int64_t total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].first);
    CHECK(params[i].first == expected[i].first);
    CHECK(params[i].second.shape() == expected[i].second);
    CHECK(params[i].second.requires_grad());
    total += params[i].second.numel();
  }
  CHECK(m.num_parameters() == total);
  // Handles alias the storage: writing through one is seen by the model.
  m.parameter("generator.bias").data()[0] = 42.0f;
  CHECK(m.generator.bias.data()[0] == 42.0f);
  CHECK_THROWS_WITH_AS(m.parameter("nope"), doctest::Contains("nope"), std::out_of_range);
}

TEST_CASE("nn.module.train_eval_zero_grad") {
  Transformer m(test::tiny_config(), 1);
  CHECK(m.is_training());
  m.eval();
  CHECK(!m.is_training());
  CHECK(!m.encoder.layers[0]->ff.dropout.is_training());
  m.train();
  CHECK(m.decoder.layers[1]->dropout3.is_training());
  const Batch b = test::padded_batch(2, 5, 4, 13, 11, 3);
  backward(sum(m.forward(b)));
  CHECK(m.generator.weight.grad().defined());
  m.zero_grad();
  for (auto& [n, p] : m.named_parameters()) CHECK(!p.grad().defined());
}

TEST_CASE("nn.config.validate") {
  TransformerConfig c = test::tiny_config();
  CHECK_NOTHROW(c.validate());
  c.heads = 3;
  CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("divisible by heads"), std::invalid_argument);
  c = test::tiny_config();
  c.d_ff = 0;
  CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("d_ff"), std::invalid_argument);
  c = test::tiny_config();
  c.activation = "tanh";
  CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("tanh"), std::invalid_argument);
  c = test::tiny_config();
  c.dropout = 1.0f;
  CHECK_THROWS_AS(Transformer(c, 0), std::invalid_argument);
}

TEST_CASE("nn.layers.shapes_and_values") {
  Generator g(5);
  Linear lin(4, 3, g);
  const Tensor x = Tensor::normal({2, 5, 4}, 0, 1, g);
  CHECK(lin.forward(x).shape() == Shape{2, 5, 3});
  // y = x W^T + b for one row by hand.
  const Tensor y = lin.forward(x);
  double ref = lin.bias.data()[1];
  for (int64_t k = 0; k < 4; ++k) ref += static_cast<double>(x.data()[k]) * lin.weight.data()[4 + k];
  CHECK(y.data()[1] == doctest::Approx(ref).epsilon(1e-5));

  Embedding emb(7, 4, g);
  const std::vector<int32_t> ids = {3, 0, 6};
  const Tensor e = emb.forward(ids, {1, 3});
  CHECK(e.shape() == Shape{1, 3, 4});
  CHECK(e.data()[4 * 2 + 1] == doctest::Approx(emb.weight.data()[6 * 4 + 1] * 2.0f));  // sqrt(4) = 2

  PositionalEncoding pe(6, 10);
  const Tensor z = pe.forward(Tensor::zeros({1, 4, 6}), 3);  // positions 3..6
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t i = 0; i < 6; i += 2) {
      const double angle = static_cast<double>(t + 3) / std::pow(10000.0, static_cast<double>(i) / 6.0);
      CHECK(z.data()[t * 6 + i] == doctest::Approx(std::sin(angle)).epsilon(1e-6));
      CHECK(z.data()[t * 6 + i + 1] == doctest::Approx(std::cos(angle)).epsilon(1e-6));
    }
  CHECK_THROWS_AS(pe.forward(Tensor::zeros({1, 4, 6}), 7), std::out_of_range);

  LayerNorm ln(4);
  const Tensor n = ln.forward(x);
  double mean = 0, var = 0;
  for (int64_t k = 0; k < 4; ++k) mean += n.data()[k] / 4.0;
  for (int64_t k = 0; k < 4; ++k) var += (n.data()[k] - mean) * (n.data()[k] - mean) / 4.0;
  CHECK(mean == doctest::Approx(0.0).epsilon(1e-5));
  CHECK(var == doctest::Approx(1.0).epsilon(1e-3));

  Dropout drop(0.5f, g);
  drop.train(false);
  CHECK(test::compare(drop.forward(x), x, 0.0).first_bad < 0);
  drop.train(true);
  const Tensor dx = drop.forward(Tensor::ones({1000}));
  int zeros = 0;
  for (int64_t i = 0; i < 1000; ++i) zeros += dx.data()[i] == 0.0f;
  CHECK(zeros > 400);
  CHECK(zeros < 600);

  FeedForward ffn(4, 8, Activation::gelu, 0.0f, g);
  CHECK(ffn.forward(x).shape() == Shape{2, 5, 4});
  CHECK(ffn.named_parameters().size() == 4);
  CHECK_THROWS_AS(parse_activation("swish"), std::invalid_argument);
}
