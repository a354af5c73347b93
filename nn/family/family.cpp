#include "nn/family/family.hpp"

#include <fmt/format.h>

#include <array>
#include <stdexcept>
#include <type_traits>

#include "io/json.hpp"
#include "nn/family/gpt_family.hpp"
#include "nn/family/transformer_family.hpp"

namespace tg::nn {

std::span<const FamilyId> known_families() {
  static constexpr std::array<FamilyId, 2> kFamilies = {kTransformerFamily, kGptFamily};
  return kFamilies;
}

const FamilyId* find_family(std::string_view format) {
  for (const FamilyId& f : known_families())
    if (f.format == format) return &f;
  return nullptr;
}

std::string fields_to_json(std::span<const ConfigField> fields) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const ConfigField& f : fields) std::visit([&](auto* p) { j[f.name] = *p; }, f.value);
  return j.dump();
}

void fields_from_json(const std::string& text, std::span<const ConfigField> fields) {
  // Strict JSON (io/json.hpp: duplicate keys refused), integers exact (json::to_int64).
  const json::Json j = json::parse(text);
  if (!j.is_object()) throw std::runtime_error(fmt::format("expected an object, got {}", j.type_name()));
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const ConfigField& f : fields) known |= key == f.name;
    if (!known) throw std::runtime_error(fmt::format("unknown field \"{}\"", key));
  }
  for (const ConfigField& f : fields) {
    const auto it = j.find(f.name);
    if (it == j.end()) throw std::runtime_error(fmt::format("missing field \"{}\"", f.name));
    try {
      std::visit(
          [&](auto* p) {
            using T = std::remove_pointer_t<decltype(p)>;
            if constexpr (std::is_same_v<T, int64_t>) {
              *p = json::to_int64(*it);
            } else if constexpr (std::is_same_v<T, float>) {
              if (!it->is_number())
                throw std::runtime_error(fmt::format("expected a number, got {}", it->type_name()));
              *p = it->get<float>();
            } else {
              it->get_to(*p);  // bool, std::string: nlohmann refuses other types
            }
          },
          f.value);
    } catch (const std::exception& e) {
      // nlohmann's message without its "[json.exception.type_error.302] " prefix.
      const std::string_view what = e.what();
      const size_t end = what.find("] ");
      throw std::runtime_error(fmt::format(
          "field \"{}\": {}", f.name,
          what.starts_with("[json.exception.") && end != what.npos ? what.substr(end + 2) : what));
    }
  }
}

void require_positive(const char* config, const char* field, int64_t value) {
  if (value <= 0)
    throw std::invalid_argument(fmt::format("{}: {} must be > 0, got {}", config, field, value));
}

void require_divisible(const char* config, const char* field, int64_t value, const char* by_field,
                       int64_t by) {
  if (value % by != 0)
    throw std::invalid_argument(
        fmt::format("{}: {} ({}) must be divisible by {} ({})", config, field, value, by_field, by));
}

void require_probability(const char* config, const char* field, float p) {
  if (!(p >= 0.0f && p < 1.0f))
    throw std::invalid_argument(fmt::format("{}: {} must be in [0, 1), got {}", config, field, p));
}

}  // namespace tg::nn
