#include "kuiper/model/llama_config.h"

#include <cmath>
#include <numbers>
#include <sstream>

namespace kuiper {

Status LlamaConfig::validate() const {
  const auto bad = [](const std::string& what) { return invalid_format("model config: " + what); };
  if (dim <= 0 || hidden_dim <= 0 || n_layers <= 0 || n_heads <= 0 || n_kv_heads <= 0 ||
      vocab_size <= 0 || max_seq_len <= 0) {
    return bad("dimensions must be positive (" + summary() + ")");
  }
  if (head_size < 0 || head_size > 1024 || sliding_window < 0) return bad("implausible head size or sliding window");
  if (head_size == 0 && dim % n_heads != 0) {
    return bad("dim " + std::to_string(dim) + " is not divisible by " + std::to_string(n_heads) + " heads");
  }
  if (n_heads % n_kv_heads != 0) {
    return bad(std::to_string(n_heads) + " heads are not a multiple of " +
               std::to_string(n_kv_heads) + " kv heads");
  }
  if (head_dim() % 2 != 0) return bad("head dimension " + std::to_string(head_dim()) + " is odd");
  if (!(std::isfinite(rope_theta) && rope_theta > 0.f) || !(std::isfinite(norm_eps) && norm_eps > 0.f)) {
    return bad("rope theta (" + std::to_string(rope_theta) + ") and norm eps (" + std::to_string(norm_eps) +
               ") must be finite numbers > 0");
  }
  // Generous bounds: larger values are corrupt headers, not models.
  if (dim > (1 << 16) || hidden_dim > (1 << 18) || n_layers > 1024 || vocab_size > (1 << 22) ||
      max_seq_len > (1 << 24)) {
    return bad("implausibly large dimensions (" + summary() + ")");
  }
  if (rope_scaling.enabled &&
      (!(std::isfinite(rope_scaling.factor) && rope_scaling.factor > 0.f) ||
       !(std::isfinite(rope_scaling.high_freq_factor) && std::isfinite(rope_scaling.low_freq_factor) &&
         rope_scaling.high_freq_factor > rope_scaling.low_freq_factor) ||
       rope_scaling.original_max_positions <= 0)) {
    return bad("invalid llama3 rope scaling parameters");
  }
  return ok_status();
}

std::string LlamaConfig::summary() const {
  std::ostringstream out;
  out << "dim " << dim << ", hidden " << hidden_dim << ", " << n_layers << " layers, " << n_heads
      << " heads (" << n_kv_heads << " kv), vocab " << vocab_size << ", seq " << max_seq_len;
  return out.str();
}

std::vector<float> rope_inverse_frequencies(const LlamaConfig& config) {
  const int half = config.head_dim() / 2;
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(config.head_dim());
    inv_freq[i] = 1.f / std::pow(config.rope_theta, exponent);
  }
  if (!config.rope_scaling.enabled) return inv_freq;

  // LLaMA 3.1 scaling: long wavelengths are slowed by `factor`, short ones kept, and the band
  // between is interpolated smoothly.
  const RopeScaling& s = config.rope_scaling;
  const float old_len = static_cast<float>(s.original_max_positions);
  const float low_freq_wavelen = old_len / s.low_freq_factor;
  const float high_freq_wavelen = old_len / s.high_freq_factor;
  for (float& f : inv_freq) {
    const float wavelen = 2.f * std::numbers::pi_v<float> / f;
    if (wavelen > low_freq_wavelen) {
      f = f / s.factor;
    } else if (wavelen >= high_freq_wavelen) {
      const float smooth = (old_len / wavelen - s.low_freq_factor) /
                           (s.high_freq_factor - s.low_freq_factor);
      f = (1.f - smooth) * f / s.factor + smooth * f;
    }
  }
  return inv_freq;
}

}  // namespace kuiper
