// The view side of MCP Apps (the `io.modelcontextprotocol/ui` extension, protocol 2026-01-26):
// JSON-RPC over postMessage with the host that framed this page. The view asks to initialize,
// says it is ready, then draws each tool result the host sends; paging and opening a dataset
// call the tool again through the host (`tools/call`).
(function () {
  'use strict';
  var PROTOCOL = '2026-01-26';
  var tool = document.body.dataset.tool;
  var root = document.getElementById('view');
  var nextId = 1;
  var pending = {};
  var toolArguments = {};

  function send(message) {
    window.parent.postMessage(message, '*');
  }

  function request(method, params) {
    var id = nextId++;
    send({ jsonrpc: '2.0', id: id, method: method, params: params });
    return new Promise(function (resolve, reject) {
      pending[id] = { resolve: resolve, reject: reject };
    });
  }

  function notify(method, params) {
    send({ jsonrpc: '2.0', method: method, params: params || {} });
  }

  function respond(id, result) {
    send({ jsonrpc: '2.0', id: id, result: result });
  }

  function callTool(name, args) {
    return request('tools/call', { name: name, arguments: args });
  }

  var shown = null; // the last result drawn, to draw again when the theme changes

  function applyContext(context) {
    if (!context) return;
    if ((context.theme === 'dark' || context.theme === 'light') && document.documentElement.dataset.theme !== context.theme) {
      document.documentElement.dataset.theme = context.theme;
      // Chart colours are read when a chart is drawn.
      if (shown) show(shown.name, shown.args, shown.result);
    }
  }

  function show(name, args, result) {
    shown = { name: name, args: args, result: result };
    window.TallyView.render(root, name, args, result, {
      callTool: callTool,
      openDataset: function (id) {
        var a = { dataset_id: id };
        callTool('inspect_dataset', a).then(function (r) { show('inspect_dataset', a, r); }, failed);
      },
    });
    reportSize();
  }

  function failed(e) {
    root.appendChild(window.TallyView.h('div', { class: 'error', role: 'alert', text: String((e && e.message) || e) }));
  }

  var lastSize = '';
  function reportSize() {
    // The content's own size (scrollHeight never falls below the frame's, so a host that
    // sizes the frame to it could only ever grow it).
    var box = document.getElementById('view').getBoundingClientRect();
    var width = Math.ceil(box.width);
    var height = Math.ceil(box.height);
    var key = width + 'x' + height;
    if (key === lastSize) return;
    lastSize = key;
    notify('ui/notifications/size-changed', { width: width, height: height });
  }

  window.addEventListener('message', function (event) {
    if (event.source !== window.parent) return;
    var m = event.data;
    if (!m || m.jsonrpc !== '2.0') return;
    if (m.method === undefined && m.id !== undefined) {
      var p = pending[m.id];
      if (!p) return;
      delete pending[m.id];
      if (m.error) p.reject(new Error(m.error.message || 'the host refused the request'));
      else p.resolve(m.result);
      return;
    }
    switch (m.method) {
      case 'ui/notifications/tool-input':
      case 'ui/notifications/tool-input-partial':
        toolArguments = (m.params && m.params.arguments) || {};
        break;
      case 'ui/notifications/tool-result':
        show(tool, toolArguments, m.params);
        break;
      case 'ui/notifications/tool-cancelled':
        root.textContent = '';
        root.appendChild(window.TallyView.h('div', { class: 'error', role: 'alert', text: 'The call was cancelled' + (m.params && m.params.reason ? ': ' + m.params.reason : '.') }));
        break;
      case 'ui/notifications/host-context-changed':
        applyContext(m.params);
        break;
      case 'ui/resource-teardown':
        respond(m.id, {});
        break;
      case 'ping':
        respond(m.id, {});
        break;
      default:
        if (m.id !== undefined) send({ jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'the Tally view does not handle ' + m.method } });
    }
  });

  if (window.ResizeObserver) new ResizeObserver(reportSize).observe(document.documentElement);

  request('ui/initialize', {
    appInfo: { name: 'tally-' + tool, version: document.body.dataset.version || '0' },
    appCapabilities: {},
    protocolVersion: PROTOCOL,
  }).then(function (result) {
    applyContext(result && result.hostContext);
    notify('ui/notifications/initialized', {});
  }, failed);
})();
