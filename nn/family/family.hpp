// The model-family seam: what a family of models is, for the code that every family shares.
//
// A family is one kind of model the programs train and read: the encoder-decoder Transformer of
// translate (transformer_family.*), the GPT of lm (gpt_family.*). Each is a short specification:
//   - its FamilyId: the checkpoint's "format" tag, the program that reads it, what it is;
//   - its config, whose fields are listed once (Config::fields()): that list gives the config's
//     JSON both ways (config_to_json / config_from_json, strict) and the names in its messages;
//     validate() with the checks below;
//   - its parameter count and its positions from the config alone, checked against a checkpoint's
//     tensors before anyone allocates the model (nn/family/checkpoint.hpp);
//   - its tokenizers (nn/tokenizers/) and the metadata keys they and the config use;
//   - construction of the model.
// Everything that is the same for every family is written once: checkpoint reading and writing
// (nn/family/checkpoint.*: the format check, the train state, the extras, the weight count, names
// and shapes, the optimizer) and, in apps/, the programs' shared subcommands and skeleton.
//
// Where to add a family: a <name>_family.{hpp,cpp} here, one line in known_families(), and its
// program's subcommands in apps/ (docs/ARCHITECTURE.md, "Model families").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tg::nn {

struct FamilyId {
  std::string_view format;   // metadata "format" of its checkpoints
  std::string_view program;  // the program whose subcommands read them ("translate", "lm")
  std::string_view what;     // "a translation model", in messages
  std::string_view doc;      // where its checkpoint keys are documented
};

// Every family this build knows, for the message that names the right program when a checkpoint
// of one family reaches the other's ("... is a language model (tapegrad.gpt.v1): use lm eval").
std::span<const FamilyId> known_families();
// The family of `format`, or nullptr.
const FamilyId* find_family(std::string_view format);

// ---- configs ------------------------------------------------------------------------------------

// One field of a config: its name in the JSON and a pointer to the member.
struct ConfigField {
  const char* name;
  std::variant<int64_t*, float*, bool*, std::string*> value;
};

// The config's fields as a JSON object in the order listed (integers exact, floats shortest
// round-trip), and back: every field present, none unknown, each of its type (integers exact:
// no fraction or exponent), else std::runtime_error naming the field.
std::string fields_to_json(std::span<const ConfigField> fields);
void fields_from_json(const std::string& text, std::span<const ConfigField> fields);

// A config C with `std::vector<ConfigField> fields()` and `void validate() const`.
template <class C>
std::string config_to_json(const C& c) {
  return fields_to_json(const_cast<C&>(c).fields());
}
template <class C>
C config_from_json(const std::string& text) {
  C c;
  fields_from_json(text, c.fields());
  c.validate();
  return c;
}

// The checks configs share; std::invalid_argument "<config>: <field> must be ...".
void require_positive(const char* config, const char* field, int64_t value);
void require_divisible(const char* config, const char* field, int64_t value, const char* by_field,
                       int64_t by);
void require_probability(const char* config, const char* field, float p);  // in [0, 1)

}  // namespace tg::nn
