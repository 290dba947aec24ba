#include "gguf/ggml_type.h"

#include <array>
#include <string>

namespace shardlm {
namespace {

struct Row {
  uint32_t id;
  GgmlTypeInfo info;
};

// Block geometry from ggml's type traits (ggml.c, type_traits[]): QK4_0 = QK8_0 = 32,
// QK_K = 256; type_size is sizeof(block_*) (static_asserted in tensor/quant_blocks.h).
constexpr std::array<Row, 32> kTypes = {{
    {0, {"f32", 1, 4}},         {1, {"f16", 1, 2}},         {2, {"q4_0", 32, 18}},
    {3, {"q4_1", 32, 20}},      {6, {"q5_0", 32, 22}},      {7, {"q5_1", 32, 24}},
    {8, {"q8_0", 32, 34}},      {9, {"q8_1", 32, 36}},      {10, {"q2_K", 256, 84}},
    {11, {"q3_K", 256, 110}},   {12, {"q4_K", 256, 144}},   {13, {"q5_K", 256, 176}},
    {14, {"q6_K", 256, 210}},   {15, {"q8_K", 256, 292}},   {24, {"i8", 1, 1}},
    {25, {"i16", 1, 2}},        {26, {"i32", 1, 4}},        {27, {"i64", 1, 8}},
    {28, {"f64", 1, 8}},        {30, {"bf16", 1, 2}},       {20, {"iq4_nl", 32, 18}},
    {23, {"iq4_xs", 256, 136}}, {16, {"iq2_xxs", 256, 66}}, {17, {"iq2_xs", 256, 74}},
    {22, {"iq2_s", 256, 82}},   {18, {"iq3_xxs", 256, 98}}, {21, {"iq3_s", 256, 110}},
    {19, {"iq1_s", 256, 50}},   {29, {"iq1_m", 256, 56}},   {34, {"tq1_0", 256, 54}},
    {35, {"tq2_0", 256, 66}},   {39, {"mxfp4", 32, 17}},
}};

// Names of ids ggml no longer has, so a message can say what the file holds.
constexpr std::array<std::pair<uint32_t, std::string_view>, 2> kOtherNames = {{
    {4, "q4_2 (removed)"},
    {5, "q4_3 (removed)"},
}};

}  // namespace

std::optional<GgmlTypeInfo> LookupGgmlType(uint32_t id) {
  for (const Row& row : kTypes) {
    if (row.id == id) return row.info;
  }
  return std::nullopt;
}

std::string GgmlTypeName(uint32_t id) {
  if (auto info = LookupGgmlType(id)) return std::string(info->name);
  for (const auto& [other_id, name] : kOtherNames) {
    if (other_id == id) return "type " + std::to_string(id) + " (" + std::string(name) + ")";
  }
  return "type " + std::to_string(id);
}

}  // namespace shardlm
