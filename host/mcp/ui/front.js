// The browser front of `tally serve --http`: a small MCP client over the same `/mcp` endpoint
// any client uses (streamable HTTP, JSON-RPC), with the same bearer tokens. It lists the
// datasets, shows one dataset's fields, builds a summarize_records or query_records call from
// pickers, runs it and draws the result with view.js. A permalink (the URL's fragment) holds
// the call, so reloading it runs the same call again.
(function () {
  'use strict';
  var PROTOCOL = '2025-11-25';
  var negotiated = PROTOCOL; // what the server answered to initialize
  var h = window.TallyView.h;
  var token = null; // in memory only
  var session = null;
  var nextId = 1;
  var current = { dataset: null, inspect: null, datasetWarnings: [], tool: 'summarize_records' };

  function $(id) { return document.getElementById(id); }
  function show(id, on) { $(id).classList.toggle('hidden', !on); }
  function status(text) { $('status').textContent = text || ''; }

  // ---- MCP over streamable HTTP ------------------------------------------------------------

  function Refused(status, message) {
    this.status = status;
    this.message = message;
  }
  Refused.prototype = Object.create(Error.prototype);

  function headers() {
    var hd = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' };
    if (token) hd.Authorization = 'Bearer ' + token;
    if (session) {
      hd['Mcp-Session-Id'] = session;
      hd['MCP-Protocol-Version'] = negotiated;
    }
    return hd;
  }

  // The JSON-RPC message answering `id` in a response: plain JSON or a server-sent event stream.
  function answerOf(text, contentType, id) {
    var messages = [];
    if (contentType.indexOf('text/event-stream') >= 0) {
      text.split(/\r?\n\r?\n/).forEach(function (event) {
        var data = event.split(/\r?\n/).filter(function (l) { return l.indexOf('data:') === 0; })
          .map(function (l) { return l.slice(5).replace(/^ /, ''); }).join('\n');
        if (data) { try { messages.push(JSON.parse(data)); } catch (e) { /* keep-alive or partial */ } }
      });
    } else if (text) {
      messages = [].concat(JSON.parse(text));
    }
    return messages.filter(function (m) { return m.id === id; })[0];
  }

  function post(body) {
    return fetch('/mcp', { method: 'POST', headers: headers(), body: JSON.stringify(body), credentials: 'omit', cache: 'no-store' })
      .then(function (response) {
        return response.text().then(function (text) {
          if (!response.ok && response.status !== 202) {
            var message = text;
            try { var e = JSON.parse(text).error; message = e.message + (e.fix ? ' — ' + e.fix : ''); } catch (err) { /* text */ }
            throw new Refused(response.status, message || response.statusText);
          }
          return { response: response, text: text };
        });
      });
  }

  function rpc(method, params) {
    var id = nextId++;
    return post({ jsonrpc: '2.0', id: id, method: method, params: params }).then(function (r) {
      var answer = answerOf(r.text, r.response.headers.get('content-type') || '', id);
      if (!answer) throw new Error('the server sent no answer to ' + method);
      if (answer.error) throw new Error(answer.error.message);
      return { result: answer.result, response: r.response };
    });
  }

  function connect() {
    session = null;
    return rpc('initialize', {
      protocolVersion: PROTOCOL,
      capabilities: {},
      clientInfo: { name: 'tally-browser-front', version: document.documentElement.dataset.version || '1' },
    }).then(function (r) {
      session = r.response.headers.get('mcp-session-id');
      negotiated = (r.result && r.result.protocolVersion) || PROTOCOL;
      return post({ jsonrpc: '2.0', method: 'notifications/initialized' });
    });
  }

  // A dataset that is being prepared or replaced answers with a code that says to retry in a
  // moment: the page does that itself (for up to a minute) and says so.
  function retryable(result) {
    if (!result || !result.isError) return false;
    var text = ((result.content || [])[0] || {}).text || '';
    return /"code":"(dataset_changing|dataset_preparing)"/.test(text);
  }

  function callTool(name, args, tries) {
    tries = tries || 0;
    var attempt = function () {
      return rpc('tools/call', { name: name, arguments: args }).then(function (r) {
        if (retryable(r.result) && tries < 120) {
          status('the dataset is being prepared…');
          return new Promise(function (resolve) { setTimeout(resolve, 500); }).then(function () {
            return callTool(name, args, tries + 1);
          });
        }
        return r.result;
      });
    };
    var ready = session ? Promise.resolve() : connect();
    return ready.then(attempt).catch(function (e) {
      // The server forgot the session (restarted, or it expired): start a new one, once.
      if (e instanceof Refused && e.status === 404 && session) {
        return connect().then(attempt);
      }
      throw e;
    }).catch(function (e) {
      if (e instanceof Refused && e.status === 401) askForToken(e.message);
      throw e;
    });
  }

  // ---- sign in -----------------------------------------------------------------------------

  function askForToken(message) {
    session = null;
    show('login', true);
    show('main', false);
    var err = $('login-error');
    if (token && message) {
      err.textContent = message;
      err.classList.remove('hidden');
    }
    $('token').focus();
  }

  $('login-form').addEventListener('submit', function (e) {
    e.preventDefault();
    token = $('token').value.trim();
    $('token').value = '';
    $('login-error').classList.add('hidden');
    session = null;
    show('login', false);
    show('main', true);
    route();
  });

  // ---- pages -------------------------------------------------------------------------------

  function crumbs(items) {
    var nav = $('crumbs');
    nav.textContent = '';
    items.forEach(function (c, i) {
      if (i) nav.appendChild(document.createTextNode(' / '));
      nav.appendChild(c.href ? h('a', { href: c.href, text: c.text }) : h('span', { text: c.text }));
    });
  }

  function failed(where) {
    return function (e) {
      if (e instanceof Refused && e.status === 401) return;
      where.textContent = '';
      where.appendChild(h('div', { class: 'error', role: 'alert', text: String((e && e.message) || e) }));
      status('');
    };
  }

  function listPage() {
    show('datasets', true);
    show('dataset', false);
    crumbs([{ text: 'Datasets' }]);
    status('loading…');
    callTool('list_datasets', {}).then(function (result) {
      status('');
      window.TallyView.render($('datasets'), 'list_datasets', {}, result, {
        openDataset: function (id) { location.hash = '#/d/' + encodeURIComponent(id); },
      });
    }, failed($('datasets')));
  }

  function option(value, text, selected) {
    return h('option', { value: value, text: text || value, selected: !!selected });
  }

  function fillBuilder(data) {
    var metrics = $('metrics');
    var g1 = $('group1');
    var g2 = $('group2');
    var wf = $('where-field');
    var sel = $('select');
    [metrics, sel].forEach(function (s) { s.textContent = ''; });
    [g1, g2].forEach(function (s) { s.textContent = ''; s.appendChild(option('', '(none)')); });
    wf.textContent = '';
    wf.appendChild(option('', '(no condition)'));
    // Computed measures first: the first metric chosen is the one charted, and a rate drawn
    // with its count beside it (the denominators) reads best.
    (data.computed_measures || []).forEach(function (m) {
      metrics.appendChild(option(m.metric, m.metric + ' (' + (m.description || m.formula) + ')'));
    });
    metrics.appendChild(option('count', 'count (records)', true));
    data.fields.forEach(function (f) {
      if (f.role === 'measure') {
        ['sum', 'avg', 'min', 'max'].forEach(function (k) { metrics.appendChild(option(k + ':' + f.name)); });
      }
      if (f.groupable) {
        g1.appendChild(option(f.name));
        g2.appendChild(option(f.name));
      }
      sel.appendChild(option(f.name, f.name, false));
      var codes = codesOf(f);
      if (codes && codes.length) wf.appendChild(option(f.name));
    });
  }

  function codesOf(f) {
    var c = f.codelist;
    if (c && c.codes) return c.codes.map(function (x) { return typeof x === 'string' ? { value: x } : x; });
    var top = (c && c.top_values) || (f.values && f.values.top_values);
    // Objects in inspect_dataset's full form, [value, count] pairs in its compact one.
    if (top) return window.TallyView.topValues(top).filter(function (t) { return t.value !== null; }).map(function (t) { return { value: String(t.value), count: t.count }; });
    return null;
  }

  function whereValues() {
    var name = $('where-field').value;
    var values = $('where-value');
    values.textContent = '';
    values.disabled = !name;
    if (!name || !current.inspect) return;
    var f = current.inspect.fields.filter(function (x) { return x.name === name; })[0];
    (codesOf(f) || []).forEach(function (c) {
      values.appendChild(option(c.value, c.value + (c.description ? ' — ' + c.description : '') + (c.count !== undefined ? ' (' + c.count + ')' : '')));
    });
  }
  $('where-field').addEventListener('change', whereValues);

  function selected(select) {
    return Array.prototype.filter.call(select.options, function (o) { return o.selected; }).map(function (o) { return o.value; });
  }

  function setTool(tool) {
    current.tool = tool;
    $('tab-summarize').setAttribute('aria-selected', String(tool === 'summarize_records'));
    $('tab-query').setAttribute('aria-selected', String(tool === 'query_records'));
    show('row-metrics', tool === 'summarize_records');
    show('row-group', tool === 'summarize_records');
    show('row-select', tool === 'query_records');
  }
  $('tab-summarize').addEventListener('click', function () { setTool('summarize_records'); });
  $('tab-query').addEventListener('click', function () { setTool('query_records'); });

  function buildCall() {
    var args = { dataset_id: current.dataset };
    var where = {};
    if ($('where-field').value && $('where-value').value) where[$('where-field').value] = [$('where-value').value];
    if (Object.keys(where).length) args.where = where;
    var limit = parseInt($('limit').value, 10);
    if (current.tool === 'summarize_records') {
      var metrics = selected($('metrics'));
      if (metrics.length) args.metrics = metrics;
      var groups = [$('group1').value, $('group2').value].filter(Boolean);
      if (groups.length) args.group_by = groups;
    } else {
      var cols = selected($('select'));
      if (cols.length) args.select = cols;
      if ($('q').value.trim()) args.q = $('q').value.trim();
    }
    if (limit > 0) args.limit = limit;
    return { name: current.tool, arguments: args };
  }

  // Puts a call's arguments back into the pickers (a permalink opened).
  function fillFrom(call) {
    setTool(call.name);
    var a = call.arguments || {};
    var pick = function (select, values) {
      Array.prototype.forEach.call(select.options, function (o) { o.selected = values.indexOf(o.value) >= 0; });
    };
    if (call.name === 'summarize_records') {
      pick($('metrics'), [].concat(a.metrics || ['count']));
      var g = [].concat(a.group_by || []);
      $('group1').value = g[0] || '';
      $('group2').value = g[1] || '';
    } else {
      pick($('select'), [].concat(a.select || []));
      $('q').value = a.q || '';
    }
    var keys = Object.keys(a.where || {});
    if (keys.length === 1 && Array.isArray(a.where[keys[0]]) && a.where[keys[0]].length === 1) {
      $('where-field').value = keys[0];
      whereValues();
      $('where-value').value = a.where[keys[0]][0];
    }
    if (a.limit) $('limit').value = a.limit;
  }

  function permalink(call) {
    return '#/d/' + encodeURIComponent(call.arguments.dataset_id) + '?call=' + encodeURIComponent(JSON.stringify(call));
  }

  function run(call) {
    var out = $('result');
    status('computing…');
    var text = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: call }, null, 2);
    $('call-json').textContent = text;
    $('permalink').setAttribute('href', permalink(call));
    show('call-details', true);
    history.replaceState(null, '', permalink(call));
    return callTool(call.name, call.arguments).then(function (result) {
      status('');
      // The table is the page asked for (its limit). A chart of a summary whose page does not
      // hold every group asks for the groups it shows in calls of its own, through the same
      // client (view.js `askChart`: the largest by the charted metric, the rest folded into
      // "others" with exact totals), and says so above it; the call shown and its permalink
      // stay the one asked.
      window.TallyView.render(out, call.name, call.arguments, result, {
        callTool: callTool, omitWarnings: current.datasetWarnings,
      });
    }, failed(out));
  }

  $('call-form').addEventListener('submit', function (e) {
    e.preventDefault();
    run(buildCall());
  });

  $('copy-call').addEventListener('click', function () {
    var text = $('call-json').textContent;
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { status('copied'); });
    } else {
      var range = document.createRange();
      range.selectNodeContents($('call-json'));
      var s = window.getSelection();
      s.removeAllRanges();
      s.addRange(range);
      status('selected: press Ctrl+C to copy');
    }
  });

  function datasetWarnings(warnings) {
    var box = $('dataset-warnings');
    box.textContent = '';
    show('dataset-warnings', warnings.length > 0);
    if (!warnings.length) return;
    box.appendChild(h('summary', { text: warnings.length === 1 ? '⚠ 1 warning about this dataset (it holds for every answer below)'
      : '⚠ ' + warnings.length + ' warnings about this dataset (they hold for every answer below)' }));
    box.appendChild(h('ul', { class: 'warnings', 'aria-label': 'dataset warnings' }, warnings.map(function (w) { return h('li', { text: w }); })));
  }

  function datasetPage(id, call) {
    show('datasets', false);
    show('dataset', true);
    crumbs([{ text: 'Datasets', href: '#/' }, { text: id }]);
    var fresh = current.dataset !== id || !current.inspect;
    current.dataset = id;
    if (fresh) {
      current.datasetWarnings = [];
      datasetWarnings([]);
    }
    if (!call) {
      $('result').textContent = '';
      show('call-details', false);
    }
    status('loading…');
    // In full: the condition picker offers each field's 30 most frequent values (the compact
    // form has 5), and the fields panel shows the codes' descriptions.
    var inspectArgs = { dataset_id: id, detail: 'full' };
    var ready = fresh
      ? callTool('inspect_dataset', inspectArgs).then(function (result) {
        var env = result && result.structuredContent;
        // What the dataset's own description warns about (no retrieval date, …) is about the
        // dataset, not about an answer: said once, above the builder, and left out of every
        // answer drawn on this page.
        current.datasetWarnings = (env && env.provenance && env.provenance.warnings) || [];
        datasetWarnings(current.datasetWarnings);
        window.TallyView.render($('inspect'), 'inspect_dataset', inspectArgs, result, { omitWarnings: current.datasetWarnings });
        if (result.isError || !env) throw new Error('the dataset could not be inspected');
        current.inspect = env.data;
        fillBuilder(current.inspect);
        setTool(current.tool);
      })
      : Promise.resolve();
    ready.then(function () {
      status('');
      if (call) {
        fillFrom(call);
        return run(call);
      }
    }).catch(failed($('result')));
  }

  function route() {
    var hash = location.hash || '#/';
    var m = /^#\/d\/([^?]+)(?:\?call=(.*))?$/.exec(hash);
    if (m) {
      var call = null;
      var id = null;
      try {
        id = decodeURIComponent(m[1]);
        if (m[2]) call = JSON.parse(decodeURIComponent(m[2]));
      } catch (e) {
        show('datasets', false);
        show('dataset', true);
        $('result').textContent = '';
        $('result').appendChild(h('div', { class: 'error', role: 'alert', text: 'this link holds no readable call (' + e.message + '); start from the datasets' }));
        return;
      }
      var valid = call && typeof call === 'object' && (call.name === 'summarize_records' || call.name === 'query_records') &&
        call.arguments && typeof call.arguments === 'object' && typeof call.arguments.dataset_id === 'string';
      if (call && !valid) call = null;
      // The call names its dataset: that is the one shown (a link edited by hand cannot show
      // one dataset's fields beside another's answer).
      datasetPage(call ? call.arguments.dataset_id : id, call);
    } else {
      current.dataset = null;
      current.inspect = null;
      listPage();
    }
  }

  // replaceState (a call run) changes the fragment without an event; links and the back
  // button do.
  window.addEventListener('hashchange', route);
  route();
})();
