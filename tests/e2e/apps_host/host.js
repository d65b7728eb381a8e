// A minimal MCP Apps host (the host side of io.modelcontextprotocol/ui, protocol 2026-01-26),
// for the browser tests: it frames a view resource exactly as the server sent it, under the
// spec's default Content-Security-Policy extended by the resource's declared domains, answers
// ui/initialize, sends the tool input and result, and forwards tools/call to the real server
// (through the test's /mcp proxy). Everything it sees is kept in window.hostLog.
(function () {
  'use strict';
  var params = new URLSearchParams(location.search);
  var caseName = params.get('case');
  var log = (window.hostLog = { received: [], sent: [], initialized: false, sizes: [], toolCalls: [] });
  var frame;
  var mcpSession = null;
  var mcpId = 1;

  function cspFor(meta) {
    var csp = (meta && meta.ui && meta.ui.csp) || {};
    var res = (csp.resourceDomains || []).join(' ');
    var conn = (csp.connectDomains || []).join(' ');
    // The spec's default, with the declared domains added where the spec says.
    return "default-src 'none'; script-src 'self' 'unsafe-inline' " + res + "; style-src 'self' 'unsafe-inline' " + res +
      "; img-src 'self' data: " + res + "; font-src 'self' " + res + "; media-src 'self' data: " + res +
      "; connect-src 'self' " + conn + "; frame-src " + ((csp.frameDomains || []).join(' ') || "'none'") +
      "; object-src 'none'; base-uri " + ((csp.baseUriDomains || []).join(' ') || "'self'");
  }

  function post(body) {
    var headers = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' };
    if (mcpSession) { headers['Mcp-Session-Id'] = mcpSession; headers['MCP-Protocol-Version'] = '2025-11-25'; }
    return fetch('/mcp', { method: 'POST', headers: headers, body: JSON.stringify(body) }).then(function (r) {
      var sid = r.headers.get('mcp-session-id');
      if (sid) mcpSession = sid;
      return r.text();
    });
  }

  function answer(text, id) {
    var found = null;
    text.split(/\r?\n/).forEach(function (line) {
      if (line.indexOf('data:') !== 0) return;
      try { var m = JSON.parse(line.slice(5)); if (m.id === id) found = m; } catch (e) { /* keep-alive */ }
    });
    if (!found && text.trim().charAt(0) === '{') { var m = JSON.parse(text); if (m.id === id) found = m; }
    return found;
  }

  function serverCall(method, params) {
    var ready = mcpSession ? Promise.resolve() : post({
      jsonrpc: '2.0', id: mcpId++, method: 'initialize',
      params: { protocolVersion: '2025-11-25', clientInfo: { name: 'apps-test-host', version: '1' },
        capabilities: { extensions: { 'io.modelcontextprotocol/ui': { mimeTypes: ['text/html;profile=mcp-app'] } } } },
    }).then(function () { return post({ jsonrpc: '2.0', method: 'notifications/initialized' }); });
    return ready.then(function () {
      var id = mcpId++;
      return post({ jsonrpc: '2.0', id: id, method: method, params: params }).then(function (t) { return answer(t, id); });
    });
  }

  function toView(message) {
    log.sent.push(message);
    frame.contentWindow.postMessage(message, '*');
  }
  // For the tests: send the view anything a host may send (context changes, teardown, …).
  window.hostSend = toView;

  fetch('/case/' + encodeURIComponent(caseName) + '.json').then(function (r) { return r.json(); }).then(function (c) {
    var html = c.resource.text;
    var meta = '<meta http-equiv="Content-Security-Policy" content="' + cspFor(c.resource._meta).replace(/"/g, '&quot;') + '">';
    html = html.replace(/<head>/i, '<head>' + meta);
    frame = document.createElement('iframe');
    frame.setAttribute('sandbox', 'allow-scripts');
    frame.setAttribute('title', c.tool + ' view');
    frame.srcdoc = html;
    document.getElementById('frame-box').appendChild(frame);

    window.addEventListener('message', function (event) {
      if (event.source !== frame.contentWindow) return;
      var m = event.data;
      log.received.push(m);
      if (!m || m.jsonrpc !== '2.0') return;
      if (m.method === 'ui/initialize') {
        toView({ jsonrpc: '2.0', id: m.id, result: {
          protocolVersion: '2026-01-26',
          hostInfo: { name: 'apps-test-host', version: '1' },
          hostCapabilities: { serverTools: {}, logging: {} },
          hostContext: { theme: 'light', displayMode: 'inline', locale: 'ja-JP', toolInfo: { tool: { name: c.tool } } },
        } });
      } else if (m.method === 'ui/notifications/initialized') {
        log.initialized = true;
        toView({ jsonrpc: '2.0', method: 'ui/notifications/tool-input', params: { arguments: c.arguments } });
        toView({ jsonrpc: '2.0', method: 'ui/notifications/tool-result', params: c.result });
      } else if (m.method === 'ui/notifications/size-changed') {
        log.sizes.push(m.params);
        if (m.params && m.params.height) frame.style.height = Math.min(Math.max(m.params.height, 200), 2000) + 'px';
      } else if (m.method === 'tools/call') {
        log.toolCalls.push(m.params);
        // Views may call only tools whose visibility includes "app".
        var visible = (c.toolsMeta[m.params.name] || {}).visibility || ['model', 'app'];
        if (visible.indexOf('app') < 0) {
          toView({ jsonrpc: '2.0', id: m.id, error: { code: -32602, message: 'tool not visible to apps' } });
          return;
        }
        serverCall('tools/call', m.params).then(function (a) {
          toView(a.error ? { jsonrpc: '2.0', id: m.id, error: a.error } : { jsonrpc: '2.0', id: m.id, result: a.result });
        });
      } else if (m.id !== undefined && m.method) {
        toView({ jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'not supported by the test host' } });
      }
    });
  });
})();
