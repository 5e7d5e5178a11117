// The HTML report as text: self-contained, hostile strings escaped, plot data embedded intact.
// (html_chromium_test.sh renders it in a real browser.)
#include "report/html_report.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "report/run_dir.h"
#include "test_util.h"

namespace llmtap::report {
namespace {

using nlohmann::json;

size_t Count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t p = haystack.find(needle); p != std::string::npos; p = haystack.find(needle, p + 1)) {
    ++n;
  }
  return n;
}

TEST(HtmlReportTest, JsonForScriptCannotCloseTheElement) {
  json v = {{"s", "</script><script>alert(1)</script> & <!-- >"}};
  std::string text = JsonForScript(v);
  EXPECT_EQ(text.find('<'), std::string::npos);
  EXPECT_EQ(text.find('>'), std::string::npos);
  EXPECT_EQ(text.find('&'), std::string::npos);
  EXPECT_EQ(json::parse(text), v);  // the escapes mean the same characters
  EXPECT_EQ(HtmlEscape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
}

TEST(HtmlReportTest, SelfContainedAndEscaped) {
  RunDir run;
  std::string error;
  ASSERT_TRUE(LoadRun(testing::DataPath("run_b"), true, &run, &error)) << error;
  const std::string evil = "</script><script>alert('x')</script><img src=x onerror=alert(1)>";
  run.summary["trace"] = evil;
  run.summary["command"] = evil;
  run.summary["warnings"] = {evil};
  run.summary["server_metrics"]["counters"][evil] = {{"delta", 1}, {"resets", 0}};
  std::string html = RenderHtmlReport(run.summary, run.requests);

  // Exactly our two script elements; no external resource of any kind.
  EXPECT_EQ(Count(html, "<script"), 2u);
  EXPECT_EQ(Count(html, "</script>"), 2u);
  EXPECT_EQ(Count(html, "<img"), 0u);
  EXPECT_EQ(Count(html, "<link"), 0u);
  EXPECT_EQ(Count(html, "<iframe"), 0u);
  EXPECT_EQ(Count(html, "href="), 0u);
  EXPECT_EQ(Count(html, "url("), 0u);
  EXPECT_EQ(Count(html, "@import"), 0u);
  EXPECT_NE(html.find("&lt;/script&gt;&lt;script&gt;alert(&#39;x&#39;)"), std::string::npos);

  // The embedded data parses and holds one entry per measured request.
  const std::string open = "<script type=\"application/json\" id=\"report-data\">";
  size_t start = html.find(open);
  ASSERT_NE(start, std::string::npos);
  start += open.size();
  size_t end = html.find("</script>", start);
  json data = json::parse(html.substr(start, end - start));
  size_t measured = 0;
  for (const RequestResult& r : run.requests) measured += r.warmup ? 0 : 1;
  EXPECT_EQ(data["requests"]["sent"].size(), measured);
  EXPECT_EQ(data["requests"]["ttft"].size(), measured);
  EXPECT_EQ(data["server_metrics"]["counters"][evil]["delta"], 1);
  EXPECT_EQ(data["summary"]["metrics"], run.summary["metrics"]);

  // The tables are there without JavaScript.
  for (const char* id : {"id=\"percentiles\"", "id=\"definitions\"", "id=\"counters\"",
                         "id=\"errors-by-kind\"", "Speculative decoding", "acceptance rate"}) {
    EXPECT_NE(html.find(id), std::string::npos) << id;
  }
}

TEST(HtmlReportTest, RendersAnEmptyOrSparseSummary) {
  std::string html = RenderHtmlReport(json::object(), {});
  EXPECT_NE(html.find("<html"), std::string::npos);
  EXPECT_NE(html.find("Not scraped."), std::string::npos);
  json odd = {{"metrics", "not an object"},
              {"server_metrics", {{"spec_decode", 3}}},
              {"shard", "x"},
              {"started_at_unix_ms", "yesterday"}};
  EXPECT_NE(RenderHtmlReport(odd, {}).find("</html>"), std::string::npos);
}

}  // namespace
}  // namespace llmtap::report
