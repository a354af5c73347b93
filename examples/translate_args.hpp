// Command-line options for the translate subcommands: declared once with their help text and
// default, parsed strictly (unknown option, missing or malformed value -> UsageError, exit 2).
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace translate {

// A bad command line: main prints the message and a usage line, and exits with status 2.
struct UsageError : std::runtime_error {
  UsageError(const std::string& what, std::string usage_line)
      : std::runtime_error(what), usage(std::move(usage_line)) {}
  std::string usage;  // the subcommand's usage line
};

class Args {
 public:
  Args(std::string command, std::string synopsis, std::string description);

  // An option taking a value ("--lr 1e-3" or "--lr=1e-3"); an empty default means "not set".
  Args& option(const std::string& name, const std::string& metavar, const std::string& help,
               const std::string& default_value = "");
  Args& flag(const std::string& name, const std::string& help);

  // Replaces an option's default (a resumed run defaults to the options it was started with).
  void set_default(const std::string& name, const std::string& value);

  // Throws UsageError; returns false when --help was given (help() is then to be printed).
  bool parse(const std::vector<std::string>& argv);

  bool given(const std::string& name) const;  // set on the command line
  bool has(const std::string& name) const;    // given or has a default
  bool flag_set(const std::string& name) const;
  std::string str(const std::string& name) const;  // UsageError when required but missing
  // Typed getters check the range and name the option in the error.
  int64_t integer(const std::string& name, int64_t min, int64_t max = INT64_MAX) const;
  double real(const std::string& name, double min, double max, bool min_inclusive = true) const;
  std::string choice(const std::string& name, const std::vector<std::string>& allowed) const;

  UsageError error(const std::string& message) const { return UsageError(message, usage()); }
  std::string usage() const;  // one line
  std::string help() const;   // full text

 private:
  struct Spec {
    std::string name, metavar, help, default_value;
    bool is_flag = false;
  };
  const Spec& spec(const std::string& name) const;

  std::string command_, synopsis_, description_;
  std::vector<Spec> specs_;
  std::map<std::string, std::string> values_;
};

}  // namespace translate
