// The command-line conventions of the tapegrad programs (translate, lm, copy_task,
// attention_walkthrough and the bench programs): each option is declared once, with its help text,
// range and default; --help is generated from those declarations; a bad command line ends with a
// message naming the option, the usage line and exit status 2.
//
//   cli::Program app("Trains a small Transformer to copy sequences.", "copy_task");
//   cli::style(app, "[options]");
//   int64_t steps = 300;
//   cli::add_int(app, "--steps", steps, "training steps", 1);          // 1 .. INT64_MAX
//   double lr = 1e-3;
//   cli::add_real(app, "--lr", lr, "peak learning rate", 0, 10, cli::kOpenMin);
//   std::optional<int> threads;
//   cli::add_threads(app, threads);
//   return cli::run(app, argc, argv, [&] { ...; return cli::kSuccess; });
//
// Values: "--opt value" and "--opt=value"; an option given twice keeps the last value. A flag
// takes no value ("--json", never "--json=1"). A value that looks like an option ("--lr --steps 3")
// is reported as a missing value.
//
// The parser is CLI11, behind this header: only apps/cli.cpp includes it. CLI11 is
// header-only, and a file that included it compiled its whole parser again (g++ 12 on a Zen 3: 7 s
// at -O1 for a file holding only the #include; lm_cli.cpp 24 s at -O3 with it, 4 s without).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "apps/cli_errors.hpp"
#include "autograd/precision.hpp"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace tg::cli {

// Checks an option's value as given: returns "" to accept it, else what is wrong ("must be >= 1,
// got 0"), which the error message prints after the option's name.
using Validator = std::function<std::string(const std::string&)>;

// One declared option; each setter returns the option for chaining.
class Option {
 public:
  explicit Option(CLI::Option* o) : o_(o) {}
  Option& required();                     // the command line must give it
  Option& excludes(const Option& other);  // not together with `other`
  Option& excludes(const std::string& name);
  Option& check(Validator v);                     // after the checks it already has
  Option& type_name(const std::string& metavar);  // "--opt METAVAR" in the help
  Option& default_str(const std::string& text);   // "(default TEXT)" in the help
  Option& capture_default_str();                  // the variable's current value as the default shown
  Option& each(std::function<void(const std::string&)> f);  // run on each value as it is parsed
  size_t count() const;                                     // how many times the command line gave it

 private:
  CLI::Option* o_;
};

// A program or one of its subcommands. The program (cli::Program) owns its commands and the CLI11
// app behind each; a Command never touches its app when destroyed (the program's goes first).
class Command {
 public:
  Command(const Command&) = delete;
  Command& operator=(const Command&) = delete;
  virtual ~Command();

  bool parsed() const;  // after run() parsed: whether the command line selected this command
  void footer(const std::string& text);
  // Runs `f` once the command's options are parsed (before the body run() calls).
  void callback(std::function<void()> f);

 protected:
  Command() = default;
  CLI::App* app_ = nullptr;
  std::vector<std::unique_ptr<Command>> commands_;

 private:
  friend struct Access;
};

class Program : public Command {
 public:
  Program(const std::string& description, const std::string& name);
  ~Program() override;

 private:
  std::unique_ptr<CLI::App> owned_;
};

// Gives `app` the house help layout, with `synopsis` after the program name in the usage line and
// `details` (if any) instead of the one-line description in its help. Call before adding options
// (their group is "options"; subcommands are listed as "commands").
void style(Command& app, const std::string& synopsis, const std::string& details = "");

// A subcommand `name` of `app` in the same style: `summary` in the parent's list of commands,
// `details` in its own help. `app` owns it.
Command* add_command(Command& app, const std::string& name, const std::string& summary,
                     const std::string& synopsis, const std::string& details);

// ---- validators: each names what it expects and what it got ("--threads: must be in [1, 1024], got 0")

inline constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();
inline constexpr double kNoMaxReal = std::numeric_limits<double>::max();
inline constexpr bool kOpenMin = true;

Validator int_range(int64_t min, int64_t max = kNoMax);               // an integer in [min, max]
Validator real_range(double min, double max, bool min_open = false);  // finite, in [min, max] or (min, max]
Validator one_of(std::vector<std::string> choices);
Validator text();  // any text but an option name (a file, a sentence)

// ---- options: the range goes into the help text, the variable's value is the default shown

Option add_int(Command& app, const std::string& name, int64_t& var, const std::string& help, int64_t min,
               int64_t max = kNoMax, const std::string& metavar = "N");
Option add_int(Command& app, const std::string& name, int& var, const std::string& help, int64_t min,
               int64_t max = kNoMax, const std::string& metavar = "N");
Option add_int(Command& app, const std::string& name, uint64_t& var, const std::string& help, int64_t min,
               int64_t max = kNoMax, const std::string& metavar = "N");
Option add_real(Command& app, const std::string& name, double& var, const std::string& help, double min,
                double max, bool min_open = false, const std::string& metavar = "X");
Option add_choice(Command& app, const std::string& name, std::string& var, const std::string& help,
                  const std::vector<std::string>& choices);

// An option without a default: `var` stays empty unless given. `default_text` says in the help
// what holds then ("adamw: 0.01, else 0").
Option add_optional_int(Command& app, const std::string& name, std::optional<int64_t>& var,
                        const std::string& help, int64_t min, int64_t max = kNoMax,
                        const std::string& metavar = "N", const std::string& default_text = "");
Option add_optional_int(Command& app, const std::string& name, std::optional<int>& var,
                        const std::string& help, int64_t min, int64_t max = kNoMax,
                        const std::string& metavar = "N", const std::string& default_text = "");
Option add_optional_real(Command& app, const std::string& name, std::optional<double>& var,
                         const std::string& help, double min, double max, const std::string& metavar = "X",
                         const std::string& default_text = "");

// A file name or other text (not an option name).
Option add_text(Command& app, const std::string& name, std::string& var, const std::string& help,
                const std::string& metavar = "FILE");
Option add_flag(Command& app, const std::string& name, bool& var, const std::string& help);

// A comma-separated list ("--threads 1,2"); `check` applies to each element.
Option add_list(Command& app, const std::string& name, std::vector<std::string>& var,
                const std::string& help);
Option add_list(Command& app, const std::string& name, std::vector<int>& var, const std::string& help);
Option add_list(Command& app, const std::string& name, std::vector<int64_t>& var, const std::string& help);

// Positional arguments (files, say), after the options in the usage: "plot_log A.jsonl B.jsonl".
Option add_positional(Command& app, const std::string& name, std::vector<std::string>& var,
                      const std::string& help);

// An option checked only by the validators the caller adds (no range in the help).
Option add_option(Command& app, const std::string& name, int64_t& var, const std::string& help);
Option add_option(Command& app, const std::string& name, std::string& var, const std::string& help);

// --threads N (1..1024): the number of kernel threads, set as soon as the option is parsed
// (ops::set_num_threads); not given, `threads` stays empty and the caller's default holds (say
// which in `help_default`).
Option add_threads(Command& app, std::optional<int>& threads, const std::string& help_default = "all cores");

// --precision fp32|bf16: the precision of the matrix products (autograd/precision.hpp), stored in
// `var` as it is parsed; its value when called is the default shown.
Option add_precision(Command& app, Precision& var);

// ---- training options kept in a checkpoint (metadata "<prefix><name>") and reused by --resume

// The options a command's command line set, by name without the dashes (after parsing: in the
// command's callback). --resume reuses the saved value of every training option not among them.
std::set<std::string> given_options(const Command& command);

// The options `names` (without the dashes) of `command` as metadata: the value given on the command
// line, else the default. An option in `only_if_given` (whose default is a description such as
// "adamw 0.01, else 0", not a value) is left out unless given.
std::map<std::string, std::string> option_values(const Command& command,
                                                 const std::vector<std::string>& names,
                                                 const std::string& prefix,
                                                 const std::set<std::string>& only_if_given = {});

// --resume: every option of `names` that the command line did not give takes its value from
// `saved` ("<prefix><name>", when present), checked as the command line's would be; a bad value
// throws std::runtime_error naming `path` and the key.
void reuse_option_values(Command& command, const std::vector<std::string>& names,
                         const std::map<std::string, std::string>& saved, const std::string& prefix,
                         const std::string& path);

// ---- running a program

// Parses the command line with `app`, then returns body()'s exit status. --help prints the help of
// the command it follows and returns kSuccess. A bad command line (a parse error, UsageError from
// body) prints the message and the usage line and returns kUsage; any other exception from body
// prints "<program>: error: <what>" (std::bad_alloc: "out of memory") and returns kFailure.
int run(Program& app, int argc, char** argv, const std::function<int()>& body);

// run() for a program of subcommands: `commands` pairs each subcommand with what runs it; a
// command line naming none is a usage error.
int run_commands(Program& app, int argc, char** argv,
                 const std::vector<std::pair<const Command*, std::function<int()>>>& commands);

}  // namespace tg::cli
