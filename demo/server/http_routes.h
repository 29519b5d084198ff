// The HTTP surface of kuiper_server: which path goes to which handler, the API key check on
// /v1/*, OpenAI error objects for everything that fails before a handler (unknown path, body
// too large), and the count of responses for /metrics.
#pragma once

#include <cstddef>

#include <httplib.h>

#include "server_context.h"

namespace kuiper::server {

// Request bodies beyond this are refused with 413 before they are parsed.
inline constexpr size_t kMaxRequestBytes = 4 << 20;

void add_routes(httplib::Server& http, ServerContext& context);

}  // namespace kuiper::server
