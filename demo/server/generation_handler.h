// POST /v1/completions and /v1/chat/completions: parse and check the request, build its prompt,
// submit it to the engine and answer with one JSON object, or stream server-sent events as the
// engine produces text. A streaming client that goes away cancels its request (the engine frees
// its KV blocks); so does one that stops reading for longer than the write timeout.
#pragma once

#include <httplib.h>

#include "openai_request.h"
#include "server_context.h"

namespace kuiper::server {

void handle_generation(ServerContext& context, Endpoint endpoint, const httplib::Request& request,
                       httplib::Response& response);

}  // namespace kuiper::server
