// The project's one text/event-stream (Server-Sent Events) framer, by the WHATWG rules: lines end
// in "\n", "\r\n" or "\r" (a "\r\n" split across two Feed calls is one line end); a leading UTF-8
// BOM is dropped; a line starting with ':' is a comment; a line with no colon is a field with an
// empty value; one space after the colon is removed; the "data" lines of an event are joined with
// "\n"; a blank line ends the event, which counts when it had at least one data line. Other fields
// (event, id, retry) are read and ignored. Bytes may be split anywhere.
//
// Two ways to use it:
// - SseFramer: push parsing with no copy and no allocation. It hands the bytes of each data line
//   to a handler as they arrive (the proxy's UsageScanner scans them in place).
// - SseEventReader: collects each event's data into one string and calls back per event (the
//   replay's ResponseMeter).
// An event not ended by a blank line when the stream ends is never dispatched by SseEventReader
// (pending() says one was open); SseFramer's handler has seen its bytes.
//
// Threads: one framer / reader per stream, used by one thread at a time; not shared.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "net/bom.h"
#include "net/byte_search.h"

namespace llmtap::net {

// Handler, called in stream order:
//   void OnDataLine(bool first_in_event);          a data line begins (its value follows)
//   void OnData(const char* begin, const char* end);  bytes of the current data line's value,
//                                                    in one or more pieces (never the line end)
//   void OnEventEnd();                             a blank line ended an event with data
class SseFramer {
 public:
  template <class Handler>
  void Feed(const char* p, const char* end, Handler& h) {
    if (!bom_.done()) {
      bool broken = false;
      p = bom_.Skip(p, end, &broken);
      if (broken) {
        // The bytes of a partial BOM begin the first line, which cannot be a data line any more.
        state_ = State::kField;
        field_matched_ = 5;
      }
    }
    while (p < end) {
      switch (state_) {
        case State::kLineStart: {
          const char c = *p;
          if (after_cr_) {
            after_cr_ = false;
            if (c == '\n') {
              ++p;
              break;
            }
          }
          if (c == '\n' || c == '\r') {
            after_cr_ = c == '\r';
            ++p;
            if (event_has_data_) {
              event_has_data_ = false;
              h.OnEventEnd();
            }
          } else if (c == ':') {
            ++p;
            state_ = State::kIgnoreLine;
          } else {
            field_matched_ = 0;
            state_ = State::kField;
          }
          break;
        }
        case State::kField:
          while (p < end) {
            const char c = *p++;
            if (c == ':') {
              if (field_matched_ == 4) {
                StartDataLine(h);
                state_ = State::kDataSpace;
              } else {
                state_ = State::kIgnoreLine;
              }
              break;
            }
            if (c == '\n' || c == '\r') {
              // A field with no colon has an empty value; "data" alone still adds a line.
              if (field_matched_ == 4) StartDataLine(h);
              after_cr_ = c == '\r';
              state_ = State::kLineStart;
              break;
            }
            constexpr char kData[] = "data";
            field_matched_ =
                field_matched_ < 4 && c == kData[field_matched_] ? field_matched_ + 1 : 5;
          }
          break;
        case State::kDataSpace:
          if (*p == ' ') ++p;
          state_ = State::kData;
          break;
        case State::kData:
        case State::kIgnoreLine: {
          const char* const eol = FindEither(p, end, '\n', '\r');
          if (state_ == State::kData && eol != p) h.OnData(p, eol);
          p = eol;
          if (p < end) {
            after_cr_ = *p == '\r';
            ++p;
            state_ = State::kLineStart;
          }
          break;
        }
      }
    }
  }

  // An event with data not yet ended by a blank line, or a line partly read.
  bool pending() const { return event_has_data_ || state_ != State::kLineStart; }

 private:
  enum class State : uint8_t { kLineStart, kField, kDataSpace, kData, kIgnoreLine };

  template <class Handler>
  void StartDataLine(Handler& h) {
    h.OnDataLine(!event_has_data_);
    event_has_data_ = true;
  }

  State state_ = State::kLineStart;
  LeadingBom bom_;
  uint8_t field_matched_ = 0;  // bytes of "data" matched by the current field name (5: no match)
  bool after_cr_ = false;      // a "\n" right after "\r" is part of the same line end
  bool event_has_data_ = false;
};

// Whole events: on_event(std::string_view data) once per event with data, the data lines joined
// with "\n".
class SseEventReader {
 public:
  template <class F>
  void Feed(std::string_view bytes, F&& on_event) {
    Collector<F> c{this, on_event};
    framer_.Feed(bytes.data(), bytes.data() + bytes.size(), c);
  }
  // An event still open when the stream ended (no blank line after it), or a partial line.
  bool pending() const { return framer_.pending(); }

 private:
  template <class F>
  struct Collector {
    SseEventReader* r;
    F& on_event;
    void OnDataLine(bool first) {
      if (!first) r->data_.push_back('\n');
    }
    void OnData(const char* b, const char* e) { r->data_.append(b, e); }
    void OnEventEnd() {
      on_event(std::string_view(r->data_));
      r->data_.clear();
    }
  };

  SseFramer framer_;
  std::string data_;
};

}  // namespace llmtap::net
