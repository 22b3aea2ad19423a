// Status helpers shared by every Fresnel library. Abseil 20220623 ships absl::Status and
// absl::StatusOr but no propagation macros, so they are defined once here.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define FRESNEL_STATUS_CONCAT_INNER_(a, b) a##b
#define FRESNEL_STATUS_CONCAT_(a, b) FRESNEL_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define FRESNEL_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status fresnel_status_ = (expr);           \
    if (!fresnel_status_.ok()) return fresnel_status_; \
  } while (0)

// `lhs = value` of the absl::StatusOr `expr`, or returns its error. `lhs` may declare a variable:
//   FRESNEL_ASSIGN_OR_RETURN(auto taps, Firwin(...));
#define FRESNEL_ASSIGN_OR_RETURN(lhs, expr) \
  FRESNEL_ASSIGN_OR_RETURN_IMPL_(FRESNEL_STATUS_CONCAT_(fresnel_statusor_, __LINE__), lhs, expr)
#define FRESNEL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()
