// SIMT emulator stand-in for <cuda_runtime.h>: the device built-ins come from simt.h.
#pragma once
#include "simt.h"
