#include "fresnel/io/signal.h"

#include <sndfile.h>

#include <cerrno>
#include <cmath>
#include <complex>
#include <algorithm>
#include <cstring>
#include <memory>
#include <fstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "fresnel/io/npy.h"
#include "io_internal.h"

namespace fresnel {
namespace {

// NotFound when the file is missing or unreadable, with the system's reason.
absl::Status OpenError(const std::string& path, int err) {
  std::string message = absl::StrCat("cannot open '", path, "': ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES) return absl::PermissionDeniedError(message);
  return absl::NotFoundError(message);
}

struct SndfileCloser {
  void operator()(SNDFILE* f) const { sf_close(f); }
};
using SndfilePtr = std::unique_ptr<SNDFILE, SndfileCloser>;

// [channels, n] row-major from a [n] or [channels, n] array, as float32.
absl::StatusOr<HostArray> AsChannelsFloat32(const HostArray& samples, const std::string& path) {
  if (samples.ndim() != 1 && samples.ndim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": expected samples of shape [n] or [channels, n], got ",
        ShapeString(samples.shape())));
  }
  absl::StatusOr<HostArray> f = ToFloat32(samples);
  if (!f.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", f.status().message(),
                                                   " (write complex signals to .npy)"));
  }
  if (f->ndim() == 1) {
    if (absl::Status s = f->Reshape({1, f->dim(0)}); !s.ok()) return s;
  }
  return f;
}

}  // namespace

SignalFormat FormatFromPath(const std::string& path) {
  const std::string ext = LowerExtension(path);
  if (ext == ".npy") return SignalFormat::kNpy;
  if (ext == ".f32" || ext == ".raw") return SignalFormat::kRawFloat32;
  return SignalFormat::kAudio;
}

const char* SignalFormatName(SignalFormat format) {
  switch (format) {
    case SignalFormat::kAudio: return "audio";
    case SignalFormat::kNpy: return "npy";
    case SignalFormat::kRawFloat32: return "raw float32";
  }
  return "?";
}

absl::Status CheckWritablePath(const std::string& path) {
  if (FormatFromPath(path) != SignalFormat::kAudio || LowerExtension(path) == ".wav") {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "cannot write '", path, "': the output extension must be .wav, .npy, .f32 or .raw"));
}

absl::StatusOr<HostArray> ToFloat32(const HostArray& array) {
  HostArray out(DType::kFloat32, array.shape());
  float* dst = out.data<float>();
  const int64_t n = array.size();
  switch (array.dtype()) {
    case DType::kFloat32:
      return array;
    case DType::kFloat64:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(array.data<double>()[i]);
      return out;
    case DType::kUint8:
      for (int64_t i = 0; i < n; ++i) dst[i] = array.data<uint8_t>()[i];
      return out;
    case DType::kUint16:
      for (int64_t i = 0; i < n; ++i) dst[i] = array.data<uint16_t>()[i];
      return out;
    case DType::kInt16:
      for (int64_t i = 0; i < n; ++i) dst[i] = array.data<int16_t>()[i];
      return out;
    case DType::kInt32:
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(array.data<int32_t>()[i]);
      return out;
    case DType::kComplex64:
    case DType::kComplex128:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cannot convert ", DTypeName(array.dtype()), " to real float32 samples"));
}

std::vector<double> ToDoubles(const HostArray& array) {
  const int64_t n = array.size();
  std::vector<double> out(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) {
    switch (array.dtype()) {
      case DType::kFloat32: out[i] = array.data<float>()[i]; break;
      case DType::kFloat64: out[i] = array.data<double>()[i]; break;
      case DType::kComplex64: out[i] = array.data<std::complex<float>>()[i].real(); break;
      case DType::kComplex128: out[i] = array.data<std::complex<double>>()[i].real(); break;
      case DType::kUint8: out[i] = array.data<uint8_t>()[i]; break;
      case DType::kUint16: out[i] = array.data<uint16_t>()[i]; break;
      case DType::kInt16: out[i] = array.data<int16_t>()[i]; break;
      case DType::kInt32: out[i] = array.data<int32_t>()[i]; break;
    }
  }
  return out;
}

absl::StatusOr<Signal> ReadAudio(const std::string& path) {
  {
    std::ifstream probe(path, std::ios::binary);
    if (!probe) return OpenError(path, errno);
  }
  SF_INFO info;
  std::memset(&info, 0, sizeof(info));
  SndfilePtr file(sf_open(path.c_str(), SFM_READ, &info));
  if (file == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not an audio file libsndfile can read (", sf_strerror(nullptr),
        "); use .npy or .f32/.raw for other signals"));
  }
  const int channels = info.channels;
  if (channels < 1) return absl::InvalidArgumentError(absl::StrCat(path, ": no channels"));
  // Read in blocks of at most 2^16 samples (256 KiB, left uninitialised), no larger than the
  // header's frame count: some formats do not know their frame count up front. The block is
  // sized by samples, not frames: a header of a few bytes may claim 1024 channels, and 2^16
  // frames of those were 256 MiB zero-filled before one sample was read (fuzz_wav spent its time
  // there: ~2 k inputs/s).
  std::vector<float> interleaved;
  sf_count_t block_frames = std::max<sf_count_t>(1, (sf_count_t{1} << 16) / channels);
  if (info.frames > 0) block_frames = std::min(block_frames, info.frames);
  std::unique_ptr<float[]> block(new float[static_cast<size_t>(block_frames * channels)]);
  while (true) {
    const sf_count_t got = sf_readf_float(file.get(), block.get(), block_frames);
    if (got <= 0) break;
    interleaved.insert(interleaved.end(), block.get(), block.get() + got * channels);
  }
  if (sf_error(file.get()) != SF_ERR_NO_ERROR) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": read error: ", sf_strerror(file.get())));
  }
  const int64_t frames = static_cast<int64_t>(interleaved.size()) / channels;
  Signal signal;
  signal.sample_rate_hz = info.samplerate;
  signal.samples = HostArray(DType::kFloat32, {channels, frames});
  float* dst = signal.samples.data<float>();
  for (int64_t i = 0; i < frames; ++i) {
    for (int c = 0; c < channels; ++c) dst[c * frames + i] = interleaved[i * channels + c];
  }
  return signal;
}

absl::Status WriteWav(const std::string& path, const HostArray& samples, double sample_rate_hz) {
  absl::StatusOr<HostArray> planar = AsChannelsFloat32(samples, path);
  if (!planar.ok()) return planar.status();
  const int64_t channels = planar->dim(0);
  const int64_t frames = planar->dim(1);
  if (!(sample_rate_hz >= 1) || sample_rate_hz > 2e9) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a WAV file needs a sample rate >= 1 Hz, got ", sample_rate_hz));
  }
  SF_INFO info;
  std::memset(&info, 0, sizeof(info));
  info.samplerate = static_cast<int>(std::lround(sample_rate_hz));
  info.channels = static_cast<int>(channels);
  info.format = SF_FORMAT_WAV | SF_FORMAT_FLOAT;
  if (!sf_format_check(&info)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": libsndfile cannot write ", channels,
                                                   " channel(s) at ", info.samplerate,
                                                   " Hz as float WAV"));
  }
  SndfilePtr file(sf_open(path.c_str(), SFM_WRITE, &info));
  if (file == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write '", path, "': ", sf_strerror(nullptr)));
  }
  std::vector<float> interleaved(static_cast<size_t>(channels * frames));
  const float* src = planar->data<float>();
  for (int64_t i = 0; i < frames; ++i) {
    for (int64_t c = 0; c < channels; ++c) interleaved[i * channels + c] = src[c * frames + i];
  }
  if (sf_writef_float(file.get(), interleaved.data(), frames) != frames) {
    return absl::DataLossError(
        absl::StrCat("cannot write '", path, "': ", sf_strerror(file.get())));
  }
  if (sf_close(file.release()) != 0) {
    return absl::DataLossError(absl::StrCat("cannot finish '", path, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<HostArray> ReadRawFloat32(const std::string& path, int channels) {
  if (channels < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": raw channel count must be >= 1, got ", channels));
  }
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return OpenError(path, errno);
  const int64_t bytes = static_cast<int64_t>(in.tellg());
  const int64_t frame_bytes = 4 * static_cast<int64_t>(channels);
  if (bytes % frame_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", bytes, " bytes is not a whole number of float32 frames of ", channels,
        " channel(s) (", frame_bytes, " bytes each); check --raw-channels"));
  }
  const int64_t frames = bytes / frame_bytes;
  std::vector<float> interleaved(static_cast<size_t>(frames * channels));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(interleaved.data()), bytes)) {
    return absl::DataLossError(absl::StrCat(path, ": read error"));
  }
  HostArray out(DType::kFloat32, {channels, frames});
  float* dst = out.data<float>();
  for (int64_t i = 0; i < frames; ++i) {
    for (int c = 0; c < channels; ++c) dst[c * frames + i] = interleaved[i * channels + c];
  }
  return out;
}

absl::Status WriteRawFloat32(const std::string& path, const HostArray& samples) {
  absl::StatusOr<HostArray> planar = AsChannelsFloat32(samples, path);
  if (!planar.ok()) return planar.status();
  const int64_t channels = planar->dim(0);
  const int64_t frames = planar->dim(1);
  std::vector<float> interleaved(static_cast<size_t>(channels * frames));
  const float* src = planar->data<float>();
  for (int64_t i = 0; i < frames; ++i) {
    for (int64_t c = 0; c < channels; ++c) interleaved[i * channels + c] = src[c * frames + i];
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write '", path, "': ", std::strerror(errno)));
  }
  out.write(reinterpret_cast<const char*>(interleaved.data()),
            static_cast<std::streamsize>(interleaved.size() * sizeof(float)));
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("cannot write '", path, "'"));
  return absl::OkStatus();
}

absl::StatusOr<Signal> ReadSignal(const std::string& path, const SignalReadOptions& options) {
  switch (FormatFromPath(path)) {
    case SignalFormat::kNpy: {
      {
        std::ifstream probe(path, std::ios::binary);
        if (!probe) return OpenError(path, errno);
      }
      absl::StatusOr<HostArray> a = ReadNpy(path);  // its errors name the file
      if (!a.ok()) return a.status();
      return Signal{*std::move(a), 0};
    }
    case SignalFormat::kRawFloat32: {
      absl::StatusOr<HostArray> a = ReadRawFloat32(path, options.raw_channels);
      if (!a.ok()) return a.status();
      return Signal{*std::move(a), 0};
    }
    case SignalFormat::kAudio:
      return ReadAudio(path);
  }
  return absl::InternalError("unreachable");
}

absl::Status WriteSignal(const std::string& path, const HostArray& samples,
                         double sample_rate_hz) {
  if (absl::Status s = CheckWritablePath(path); !s.ok()) return s;
  switch (FormatFromPath(path)) {
    case SignalFormat::kNpy:
      return WriteNpy(path, samples);
    case SignalFormat::kRawFloat32:
      return WriteRawFloat32(path, samples);
    case SignalFormat::kAudio:
      return WriteWav(path, samples, sample_rate_hz);
  }
  return absl::InternalError("unreachable");
}

}  // namespace fresnel
