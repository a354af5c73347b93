// Command lines of the bench programs: the programs' conventions (apps/cli.hpp: ranges named in
// the errors, exit status 2 for a bad command line, generated --help) and the options they share.
#pragma once

#include <string>

#include "apps/cli.hpp"

namespace tg::bench {

// --config S|M: the model and data of bench/train_configs.hpp.
inline cli::Option add_config_option(cli::Command& app, std::string& config) {
  return cli::add_choice(
      app, "--config", config,
      "S: d 128, 4 heads, ff 512, 2+2 layers, vocab 32, batch 64, length 32; M: d 256, 8 heads, "
      "ff 1024, 3+3 layers, vocab 1000, batch 64, length 64 (both: dropout 0.1, Adam, label "
      "smoothing 0.1)",
      {"S", "M"});
}

}  // namespace tg::bench
