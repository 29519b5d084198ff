// kuiper_server: an OpenAI-compatible HTTP server over the multi-sequence engine.
//   kuiper_server                                  # the bundled stories260K on 127.0.0.1:8080
//   kuiper_server -m model.bin --port 9000 --api-key secret --max-seqs 8
//   curl http://127.0.0.1:8080/v1/completions -d '{"model": "stories260K", "prompt": "Once", "max_tokens": 64}'
// Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
// GET /metrics. The engine runs on its own thread; each HTTP connection has a handler thread
// that submits its request and waits for the engine's output. SIGINT/SIGTERM: stop accepting,
// cancel what runs (clients get an error event or a 503), exit 0.
#include <semaphore.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli_common.h"
#include "guarded_main.h"
#include "kuiper/engine/engine.h"
#include "kuiper/generation/chat_template_choice.h"
#include "server/http_routes.h"

namespace kuiper {
namespace {

constexpr const char* kProgram = "kuiper_server";

struct ServerFlags {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  std::string model_name;  // empty: the model file's name without extension
  std::string chat_template = "auto";
  EngineOptions engine;
};

void add_server_flags(CLI::App& app, ServerFlags& flags) {
  flags.engine.max_waiting = 64;
  app.add_option("--host", flags.host, "address to listen on (default: 127.0.0.1, this machine only)");
  app.add_option("--port", flags.port, "TCP port (default: 8080)")->check(CLI::Range(1, 65535));
  app.add_option("--api-key", flags.api_key, "require 'Authorization: Bearer KEY' on /v1/* (default: none)");
  app.add_option("--model-name", flags.model_name, "the model's id in the API (default: the file's name)");
  app.add_option("--template", flags.chat_template,
                 "chat layout of /v1/chat/completions: llama2, llama3, chatml, mistral, or auto (from the "
                 "model's chat_template, generation_config.json or tokenizer)")
      ->check(CLI::IsMember({"auto", "llama2", "llama3", "chatml", "mistral"}));
  app.add_option("--max-seqs", flags.engine.max_seqs, "sequences decoded together (default: 16)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--kv-blocks", flags.engine.kv_blocks, "KV cache blocks (default: max-seqs full contexts)")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--max-waiting", flags.engine.max_waiting,
                 "queued requests beyond which new ones get 429 (default: 64)")
      ->check(CLI::Range(0, 1 << 16));
}

std::string default_model_name(const std::string& model_path) {
  const std::filesystem::path path(model_path);
  std::error_code unreachable;  // the loader has already reported an unreadable path
  return std::filesystem::is_directory(path, unreachable) ? path.filename().string() : path.stem().string();
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Posted by SIGINT/SIGTERM (sem_post is async-signal-safe), by a failing engine and by an
// HTTP server that stopped on its own; the shutdown thread waits on it. A handler rather than
// sigwait: libraries start threads before main (OpenBLAS), which a signal mask cannot cover.
sem_t shutdown_requested;

void request_shutdown(int) { sem_post(&shutdown_requested); }

// On SIGINT/SIGTERM (or when the engine fails): refuse new requests, cancel those that run,
// give their handlers a moment to tell their clients, and stop the HTTP server.
void shut_down(server::ServerContext& context, httplib::Server& http) {
  context.shutting_down = true;
  context.engine.stop();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(6);
  while (context.requests_in_flight > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  http.stop();
}

int serve(int argc, char** argv) {
  CLI::App app{"Serve a LLaMA model over an OpenAI-compatible HTTP API.", kProgram};
  cli::ModelFlags model_flags;
  ServerFlags flags;
  cli::add_model_flags(app, model_flags, /*sampling=*/false);
  add_server_flags(app, flags);
  if (auto code = cli::parse_or_exit_code(app, argc, argv)) return *code;

  sem_init(&shutdown_requested, 0, 0);
  struct sigaction on_stop = {};
  on_stop.sa_handler = request_shutdown;
  sigaction(SIGINT, &on_stop, nullptr);
  sigaction(SIGTERM, &on_stop, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a write to a client that went away fails instead

  auto loaded = cli::load_engine(model_flags, flags.engine);
  if (!loaded.ok()) return cli::fail(kProgram, loaded.status());
  const Tokenizer& tokenizer = *loaded->tokenizer;
  auto kind = parse_chat_template_kind(flags.chat_template);
  if (!kind.ok()) return cli::fail(kProgram, kind.status());
  auto hints = read_chat_template_hints(loaded->model_path);
  if (!hints.ok()) return cli::fail(kProgram, hints.status());
  auto chat_template = choose_chat_template(*kind, *hints, tokenizer);
  if (!chat_template.ok()) return cli::fail(kProgram, chat_template.status());

  server::ServerContext context(*loaded->engine, **chat_template,
                                flags.model_name.empty() ? default_model_name(loaded->model_path) : flags.model_name,
                                flags.api_key, unix_seconds());
  httplib::Server http;
  server::add_routes(http, context);
  // A handler thread per connection: enough for every running and queued request, so that a
  // full queue is answered by the engine's refusal (429) rather than left waiting in httplib.
  const int handler_threads = flags.engine.max_seqs + flags.engine.max_waiting + 8;
  http.new_task_queue = [handler_threads] { return new httplib::ThreadPool(handler_threads); };
  // cpp-httplib listens with a backlog of 5 connections (CPPHTTPLIB_LISTEN_BACKLOG, built into
  // Debian's library): when more clients connect at once, the kernel drops the others' handshakes
  // and they retry a second later, which showed as a 1 s tail in the time to first token. Listening
  // again on the bound socket with a backlog as deep as the handler threads removes it.
  socket_t listening_socket = INVALID_SOCKET;
  http.set_socket_options([&listening_socket](socket_t sock) {
    httplib::default_socket_options(sock);
    listening_socket = sock;
  });
  if (!http.bind_to_port(flags.host, flags.port) || ::listen(listening_socket, handler_threads) != 0) {
    return cli::fail(kProgram, io_error("cannot listen on " + flags.host + ":" + std::to_string(flags.port)));
  }

  Status engine_status;
  std::atomic<bool> listening_done{false};
  std::thread engine_thread([&] {
    engine_status = loaded->engine->run();
    if (!engine_status.ok()) request_shutdown(0);
  });
  std::thread shutdown_thread([&] {
    while (sem_wait(&shutdown_requested) != 0) {
    }
    // A signal that comes before listen() started would find nothing to stop.
    while (!http.is_running() && !listening_done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    shut_down(context, http);
  });
  std::fprintf(stderr, "%s: serving %s (%s) on http://%s:%d/v1\n", kProgram, context.model_id.c_str(),
               loaded->format.c_str(), flags.host.c_str(), flags.port);
  http.listen_after_bind();
  listening_done = true;
  const bool stopped_unasked = !context.shutting_down;
  if (stopped_unasked) request_shutdown(0);  // to stop the engine
  shutdown_thread.join();
  engine_thread.join();
  if (!engine_status.ok()) return cli::fail(kProgram, engine_status);
  if (stopped_unasked) return cli::fail(kProgram, io_error("the HTTP server stopped accepting connections"));
  std::fprintf(stderr, "%s: stopped\n", kProgram);
  return 0;
}

}  // namespace
}  // namespace kuiper

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  return kuiper::cli::guarded_main("kuiper_server", [&] { return kuiper::serve(argc, argv); });
}
