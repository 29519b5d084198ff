// Element types and devices: the two axes every tensor and every kernel is keyed by.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kuiper {

// kINT4 packs two 4-bit weights in a byte (op/int4_weight.h): an element of a kINT4 tensor is
// that byte, so its last dimension counts pairs of weights.
enum class DataType : uint8_t { kFP32 = 0, kFP16, kBF16, kINT8, kINT32, kINT4 };
inline constexpr int kNumDataTypes = 6;

enum class DeviceType : uint8_t { kCPU = 0, kCUDA };

constexpr size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::kFP32: return 4;
    case DataType::kFP16: return 2;
    case DataType::kBF16: return 2;
    case DataType::kINT8: return 1;
    case DataType::kINT32: return 4;
    case DataType::kINT4: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DataType t) {
  switch (t) {
    case DataType::kFP32: return "fp32";
    case DataType::kFP16: return "fp16";
    case DataType::kBF16: return "bf16";
    case DataType::kINT8: return "int8";
    case DataType::kINT32: return "int32";
    case DataType::kINT4: return "int4";
  }
  return "?";
}

constexpr std::string_view device_name(DeviceType d) {
  return d == DeviceType::kCPU ? "cpu" : "cuda";
}

}  // namespace kuiper
