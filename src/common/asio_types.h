// The Asio vocabulary of llmtap's event loops (sim, proxy, replay). Every connection lives on
// one single-threaded io_context, so the concrete executor type is used everywhere: it spares
// the type-erased any_io_executor, copied and destroyed on every operation. Include from .cc
// files only, then `using namespace llmtap::asio_types;` inside the part's namespace.
#pragma once

#include <chrono>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/basic_stream_socket.hpp>
#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/error_code.hpp>

namespace llmtap::asio_types {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using Executor = asio::io_context::executor_type;
template <typename T>
using awaitable = asio::awaitable<T, Executor>;
constexpr asio::use_awaitable_t<Executor> use_awaitable;
using Socket = asio::basic_stream_socket<tcp, Executor>;
using Acceptor = asio::basic_socket_acceptor<tcp, Executor>;
using Timer = asio::basic_waitable_timer<Clock, asio::wait_traits<Clock>, Executor>;

}  // namespace llmtap::asio_types
