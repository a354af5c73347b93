// Base64 (RFC 4648 section 4: the standard alphabet, '=' padding, no line breaks), for binary blobs
// stored in a checkpoint's metadata, whose values are strings (a SentencePiece model: nn/tokenizers/spm.*).
#pragma once

#include <string>
#include <string_view>

namespace tg::io {

std::string base64_encode(std::string_view bytes);

// Strict: the length is a multiple of 4, only the alphabet, at most two '=' and only at the end, and
// the bits a padded group leaves over are zero (so each text decodes from exactly one encoding).
// Throws std::invalid_argument naming the problem and, for a bad character, its offset.
std::string base64_decode(std::string_view text);

}  // namespace tg::io
