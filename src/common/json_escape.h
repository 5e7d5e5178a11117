// JSON string escaping shared by the simulator and the proxy. A pure function; any thread may
// call it.
#pragma once

#include <string>
#include <string_view>

namespace llmtap {

// Appends `s` to `out` as the inside of a JSON string (no quotes): `"` and `\` are escaped, the
// short escapes (\n \r \t \b \f) are used where JSON has them, other control bytes become
// \u00XX, everything else is copied as is. `s` must be valid UTF-8.
void AppendJsonEscaped(std::string* out, std::string_view s);

}  // namespace llmtap
