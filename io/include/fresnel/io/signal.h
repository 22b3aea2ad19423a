// Signal files (the `fresnel` CLI's inputs and outputs). The format follows the file name's extension
// (case-insensitive):
//   .npy        NumPy array, [n] or [channels, n], any fresnel::DType, no sample rate
//   .f32 .raw   raw little-endian float32, channels interleaved frame by frame (like
//               `sox -t f32`); the channel count is not in the file and must be given
//   otherwise   audio through libsndfile (WAV, FLAC, AIFF, Ogg, ... anything it reads), decoded
//               to float32 [channels, n] in [-1, 1] with the file's sample rate; written only
//               as .wav, 32-bit float
// Every function reports problems as absl::Status naming the file: NotFound when it cannot be
// opened, InvalidArgument when its contents are malformed or unsupported.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fresnel/core/array.h"

namespace fresnel {

enum class SignalFormat { kAudio, kNpy, kRawFloat32 };

SignalFormat FormatFromPath(const std::string& path);
const char* SignalFormatName(SignalFormat format);
// OK when WriteSignal can write `path` (.npy, .f32, .raw, .wav); InvalidArgument otherwise.
absl::Status CheckWritablePath(const std::string& path);

struct Signal {
  HostArray samples;          // [channels, n] for audio and raw files; as stored for .npy
  double sample_rate_hz = 0;  // 0 when the file does not record one (.npy, raw)
};

struct SignalReadOptions {
  int raw_channels = 1;  // channels of a raw float32 file
};

absl::StatusOr<Signal> ReadSignal(const std::string& path, const SignalReadOptions& options = {});

// Writes `samples` ([n] or [channels, n]) in the format of `path`. Audio and raw files hold real
// float32 samples: float64 and integer arrays are converted, complex ones are refused. A WAV file
// needs sample_rate_hz >= 1 (rounded to whole Hz).
absl::Status WriteSignal(const std::string& path, const HostArray& samples, double sample_rate_hz);

// The individual formats.
absl::StatusOr<Signal> ReadAudio(const std::string& path);
absl::Status WriteWav(const std::string& path, const HostArray& samples, double sample_rate_hz);
absl::StatusOr<HostArray> ReadRawFloat32(const std::string& path, int channels);
absl::Status WriteRawFloat32(const std::string& path, const HostArray& samples);

// Converts a real array of any dtype to float32 (same shape); InvalidArgument for complex input.
absl::StatusOr<HostArray> ToFloat32(const HostArray& array);
// The real part (or value) of every element as double, row-major.
std::vector<double> ToDoubles(const HostArray& array);

}  // namespace fresnel
