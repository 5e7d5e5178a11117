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

// The replay-fidelity certificate (summary.json "fidelity"): its section, per group a table of
// verdicts, every string escaped; no section without the document, and odd shapes render.
TEST(HtmlReportTest, FidelitySection) {
  RunDir run;
  std::string error;
  ASSERT_TRUE(LoadRun(testing::DataPath("run_b"), true, &run, &error)) << error;
  EXPECT_EQ(RenderHtmlReport(run.summary, run.requests).find("id=\"fidelity\""), std::string::npos);
  run.summary["fidelity"] = nullptr;  // a run without captured outcomes
  EXPECT_EQ(RenderHtmlReport(run.summary, run.requests).find("id=\"fidelity\""), std::string::npos);

  json doc = json::parse(testing::ReadData("fidelity.json"));
  const std::string evil = "<script>alert(1)</script>";
  doc["floor"]["label"] = evil;
  doc["moved"].push_back(evil);
  doc["groups"][1]["label"] = evil;
  doc["groups"][1]["metrics"][0]["detail"] = evil;
  doc["groups"][1]["errors"]["replayed"][evil] = 3;
  run.summary["fidelity"] = doc;
  std::string html = RenderHtmlReport(run.summary, run.requests);
  EXPECT_EQ(Count(html, "<section id=\"fidelity\">"), 1u);
  EXPECT_EQ(Count(html, "<script"), 2u);  // only the page's own
  EXPECT_EQ(Count(html, "&lt;script&gt;alert(1)&lt;/script&gt;"), 5u);
  // After the server's report, before the plots.
  EXPECT_LT(html.find("What the server reported"), html.find("id=\"fidelity\""));
  EXPECT_LT(html.find("id=\"fidelity\""), html.find("id=\"plot-rate\""));
  // The headline, the floor, a table of verdicts per group, the verdicts styled.
  EXPECT_NE(html.find("<div class=\"verdict v-bad\"><b>not certified</b>: 8 of 10"),
            std::string::npos);
  EXPECT_NE(html.find("36 of 36 pairs joined"), std::string::npos);
  EXPECT_NE(html.find("id=\"fidelity-0-metrics\""), std::string::npos);
  EXPECT_NE(html.find("id=\"fidelity-1-metrics\""), std::string::npos);
  EXPECT_NE(html.find("<td class=\"verdict v-bad\">not reproduced</td>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"verdict v-ok\">reproduced</td>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"verdict v-unknown\">unknown</td>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"verdict v-na\">n/a</td>"), std::string::npos);
  // Timing: ratio, CI, floor band, tolerance; nulls as "-".
  EXPECT_NE(html.find("<td>server_prompt_ms</td><td>36</td><td>20</td><td>36.80</td><td>1.840</td>"
                      "<td>[1.610, 2.100]</td><td>±0.150</td><td>±0.150</td>"),
            std::string::npos);
  EXPECT_NE(html.find("<td>server_decode_ms</td><td>0</td><td>0</td><td>0</td><td>-</td><td>-</td>"
                      "<td>-</td><td>±0.100</td>"),
            std::string::npos);
  // The server's cache captured vs replayed; spec not reported in group "all".
  EXPECT_NE(html.find("<td>36</td><td>61.0 %</td><td>48.6 %</td><td>-12.4</td><td>+0.8</td>"),
            std::string::npos);
  EXPECT_NE(html.find("not reported</td>"), std::string::npos);
  EXPECT_NE(html.find("<td>http_5xx</td><td>0</td><td>1</td>"), std::string::npos);
  EXPECT_NE(html.find("<td>no_response</td><td>0</td><td>1</td>"), std::string::npos);
  EXPECT_NE(html.find("the client&#39;s TTFT moved"), std::string::npos);

  // A document of another shape renders, members missing or of the wrong type as "-".
  for (json odd : {json::object(), json({{"groups", {1, nullptr, json::object()}}}),
                   json({{"floor", {{"source", "none"}}},
                         {"groups",
                          {{{"metrics", {1, {{"verdict", 3}}}},
                            {"timing", {{"ttft_ms", nullptr}}},
                            {"server", {{"cache", 1}}},
                            {"errors", {{"captured", {{"x", "y"}}}}}}}}}),
                   json({{"options", "x"}, {"moved", "x"}, {"certified", "yes"}})}) {
    run.summary["fidelity"] = odd;
    html = RenderHtmlReport(run.summary, run.requests);
    EXPECT_EQ(Count(html, "<section id=\"fidelity\">"), 1u) << odd.dump();
    EXPECT_NE(html.find("</html>"), std::string::npos);
  }
  EXPECT_NE(html.find("<b>-</b>"), std::string::npos);  // no verdict, "certified" not a bool
}

}  // namespace
}  // namespace llmtap::report
