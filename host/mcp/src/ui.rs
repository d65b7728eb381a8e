//! What Tally shows: one MCP Apps view per tool (`ui://tally/<tool>`, the
//! `io.modelcontextprotocol/ui` extension) and the browser front `tally serve --http` serves
//! at `/`. Both are built from the files in `host/mcp/ui/`, embedded at build time: no
//! request leaves the page.
//!
//! A client that does not announce the extension sees none of this: no `_meta.ui` on the
//! tools or results, no `ui://` resources in the list.

use rmcp::model::{ClientCapabilities, JsonObject, MetaObject};
use serde_json::{Value, json};
use tally_semantic::Tool;

/// The MCP Apps extension's identifier in the capabilities' `extensions`.
pub const EXTENSION: &str = "io.modelcontextprotocol/ui";
/// The MIME type of an MCP Apps view.
pub const MIME: &str = "text/html;profile=mcp-app";
const SCHEME: &str = "ui://tally/";

/// Apache ECharts (bar, pie, treemap, heatmap, sankey; SVG renderer), a pinned subset built
/// by `ui/vendor/echarts/build` (see its README for why this library and how to rebuild).
const ECHARTS_JS: &str = include_str!("../ui/vendor/echarts/echarts.min.js");
const VIEW_JS: &str = include_str!("../ui/view.js");
const VIEW_CSS: &str = include_str!("../ui/view.css");
const APP_JS: &str = include_str!("../ui/app.js");
const FRONT_JS: &str = include_str!("../ui/front.js");
const FRONT_CSS: &str = include_str!("../ui/front.css");
const FRONT_HTML: &str = include_str!("../ui/front.html");

/// The browser front's Content-Security-Policy: scripts, styles and calls from this server
/// only, nothing inline, no frames, no forms sent anywhere.
pub const FRONT_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// A file of the browser front by its path (`/` is the page), with its content type.
pub fn front_file(path: &str) -> Option<(&'static str, &'static str)> {
    Some(match path {
        "/" | "/index.html" => ("text/html; charset=utf-8", FRONT_HTML),
        "/app/view.css" => ("text/css; charset=utf-8", VIEW_CSS),
        "/app/front.css" => ("text/css; charset=utf-8", FRONT_CSS),
        "/app/echarts.min.js" => ("text/javascript; charset=utf-8", ECHARTS_JS),
        "/app/view.js" => ("text/javascript; charset=utf-8", VIEW_JS),
        "/app/front.js" => ("text/javascript; charset=utf-8", FRONT_JS),
        _ => return None,
    })
}

/// The view resource of a tool.
pub fn uri(tool: Tool) -> String {
    format!("{SCHEME}{}", tool.name())
}

/// Whether `tool` has a view.
pub fn has_view(tool: Tool) -> bool {
    // Said in the tool table (`tally_semantic::request::TOOLS`); a test holds view.js to it.
    tool.info().view.is_some()
}

/// The tool whose view `uri` names.
pub fn tool_of(uri: &str) -> Option<Tool> {
    let name = uri.strip_prefix(SCHEME)?;
    Tool::ALL
        .into_iter()
        .find(|t| t.name() == name && has_view(*t))
}

/// Whether a client renders MCP Apps views: it announces the extension with the HTML
/// profile among its MIME types.
pub fn supported_by(capabilities: Option<&ClientCapabilities>) -> bool {
    capabilities
        .and_then(|c| c.extensions.as_ref())
        .and_then(|e| e.get(EXTENSION))
        .and_then(|settings| settings.get("mimeTypes"))
        .and_then(Value::as_array)
        .is_some_and(|types| types.iter().any(|t| t.as_str() == Some(MIME)))
}

fn meta(v: Value) -> MetaObject {
    match v {
        Value::Object(m) => MetaObject(m),
        _ => MetaObject(JsonObject::new()),
    }
}

/// `_meta` of a tool with a view: shown to the model and callable from the view (paging,
/// opening a dataset). The flat key is the one hosts read before the nested form existed.
pub fn tool_meta(tool: Tool) -> MetaObject {
    let uri = uri(tool);
    meta(json!({
        "ui": { "resourceUri": uri, "visibility": ["model", "app"] },
        "ui/resourceUri": uri,
    }))
}

/// `_meta` of a result, naming the view that draws it.
pub fn result_meta(tool: Tool) -> MetaObject {
    meta(json!({ "ui": { "resourceUri": uri(tool) } }))
}

/// `_meta` of a view: no network at all (no domain to connect to or load from), and a border.
pub fn resource_meta() -> MetaObject {
    meta(json!({
        "ui": {
            "csp": { "connectDomains": [], "resourceDomains": [], "frameDomains": [], "baseUriDomains": [] },
            "prefersBorder": true,
        }
    }))
}

/// What a view resource is called in `resources/list`.
pub fn title(tool: Tool) -> String {
    let what = tool.info().view.unwrap_or("its answer, read as text");
    format!("Tally view of {}: {what}", tool.name())
}

/// A script or style sheet as the body of an inline element: `</` cannot end it early.
fn inline(text: &str) -> String {
    text.replace("</", "<\\/")
}

/// Whether a tool's view draws charts: only a summary's does (view.js calls the chart
/// library in `drawSummary` alone), so only its page carries the library, the bulk of a page.
pub fn draws_charts(tool: Tool) -> bool {
    tool == Tool::SummarizeRecords
}

/// The whole view of a tool: one self-contained HTML document (the host frames it with no
/// network, so the code is inline), with the chart library only where the view draws charts.
pub fn view_html(tool: Tool) -> String {
    let echarts = if draws_charts(tool) {
        format!("<script>{}</script>", inline(ECHARTS_JS))
    } else {
        String::new()
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Tally: {name}</title><style>{css}</style></head>\
         <body data-tool=\"{name}\" data-version=\"{version}\"><main id=\"view\" class=\"tally-view\" aria-live=\"polite\">\
         <p id=\"waiting\" class=\"muted\">Waiting for the result…</p></main>\
         {echarts}<script>{view}</script><script>{app}</script></body></html>\n",
        name = tool.name(),
        version = env!("CARGO_PKG_VERSION"),
        css = inline(VIEW_CSS),
        view = inline(VIEW_JS),
        app = inline(APP_JS),
    )
}

/// A result as a file that opens in any browser with no server: the tool's view with the
/// result inside it (what `tally summarize --chart FILE.html` writes).
pub fn standalone_html(tool: Tool, arguments: &Value, envelope: &Value) -> String {
    let text = serde_json::to_string(envelope).unwrap_or_default();
    // The result as MCP clients receive it, so the view draws exactly what they would.
    let payload = json!({
        "tool": tool.name(),
        "arguments": arguments,
        "result": {
            "content": [{ "type": "text", "text": text }],
            "structuredContent": envelope,
            "isError": false,
        },
    });
    let title = envelope
        .pointer("/provenance/sources/0/title")
        .and_then(Value::as_str)
        .unwrap_or("Tally");
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\
         <title>{title}</title><style>{css}</style></head>\
         <body data-tool=\"{name}\"><main id=\"view\" class=\"tally-view\"></main>\
         <script type=\"application/json\" id=\"tally-result\">{payload}</script>\
         <script>{echarts}</script><script>{view}</script>\
         <script>(function () {{ var d = JSON.parse(document.getElementById('tally-result').textContent); \
         window.TallyView.render(document.getElementById('view'), d.tool, d.arguments, d.result, {{}}); }})();</script>\
         </body></html>\n",
        title = escape_text(title),
        name = tool.name(),
        css = inline(VIEW_CSS),
        // `<` only occurs inside JSON strings, where \u003c reads the same: no `</script>`
        // or `<!--` can change how the page parses.
        payload = payload.to_string().replace('<', "\\u003c"),
        echarts = inline(ECHARTS_JS),
        view = inline(VIEW_JS),
    )
}

/// Text for an HTML element's content.
fn escape_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_a_view_that_names_it() {
        for tool in Tool::ALL.into_iter().filter(|t| has_view(*t)) {
            assert_eq!(tool_of(&uri(tool)), Some(tool));
            let html = view_html(tool);
            assert!(html.contains(&format!("data-tool=\"{}\"", tool.name())));
            // view.js draws it: a view offered for a tool it cannot draw would be blank.
            assert!(
                VIEW_JS.contains(&format!("tool === '{}'", tool.name())),
                "view.js does not draw {}",
                tool.name()
            );
            // One document: the only closing script tags are those it opens, the chart
            // library's only where the view draws charts.
            let scripts = if draws_charts(tool) { 3 } else { 2 };
            assert_eq!(html.matches("</script>").count(), scripts);
            assert_eq!(
                html.contains(ECHARTS_JS.get(..200).unwrap_or_default()),
                draws_charts(tool)
            );
            assert!(
                !html.contains("src=\""),
                "a view loads nothing from outside"
            );
        }
        assert_eq!(tool_of("ui://tally/nothing"), None);
        assert_eq!(tool_of("ui://other/query_records"), None);
    }

    /// Each view's page carries only what its tool needs: a page without charts is a tenth of
    /// one with the chart library (it was 723 KB for every tool).
    #[test]
    fn a_view_without_charts_carries_no_chart_library() {
        let chart = view_html(Tool::SummarizeRecords).len();
        for tool in Tool::ALL
            .into_iter()
            .filter(|t| has_view(*t) && !draws_charts(*t))
        {
            let size = view_html(tool).len();
            assert!(
                size * 5 < chart && size < 128 * 1024,
                "{}: {size} bytes against {chart} with charts",
                tool.name()
            );
        }
        // That view.js needs the library only to draw a chart is held in headless Chromium
        // (tests/e2e/test_views.py: every view opens without a console error).
    }

    #[test]
    fn a_standalone_result_cannot_close_its_script_early() {
        let envelope = json!({ "data": { "rows": [["</script><script>alert(1)</script>"]] } });
        let html = standalone_html(Tool::SummarizeRecords, &json!({}), &envelope);
        assert_eq!(html.matches("</script>").count(), 4);
        assert!(html.contains("\\u003c/script>\\u003cscript>alert(1)\\u003c/script>"));
    }

    #[test]
    fn only_clients_announcing_the_html_profile_get_views() {
        let with = |settings: Value| -> ClientCapabilities {
            serde_json::from_value(json!({ "extensions": { EXTENSION: settings } })).unwrap()
        };
        assert!(supported_by(Some(&with(json!({ "mimeTypes": [MIME] })))));
        assert!(!supported_by(Some(&with(
            json!({ "mimeTypes": ["text/plain"] })
        ))));
        assert!(!supported_by(Some(&with(json!({})))));
        assert!(!supported_by(Some(&ClientCapabilities::default())));
        assert!(!supported_by(None));
    }
}
