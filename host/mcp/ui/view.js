// Tally's views of a tool result: the MCP Apps views (app.js) and the browser front (front.js)
// both draw with this file. Everything shown comes from the result envelope as the server
// validated it; nothing is recomputed here but layout (sorting for display, percentages of
// numbers the server gave). Text from data is only ever set as text, never as HTML.
(function () {
  'use strict';

  var NO_VALUE = '(no value)';

  // ---- DOM helpers -------------------------------------------------------------------------

  function h(tag, props, children) {
    var el = document.createElement(tag);
    props = props || {};
    Object.keys(props).forEach(function (k) {
      var v = props[k];
      if (v === undefined || v === null || v === false) return;
      if (k === 'text') el.textContent = String(v);
      else if (k === 'class') el.className = v;
      else if (k === 'on') Object.keys(v).forEach(function (ev) { el.addEventListener(ev, v[ev]); });
      else if (k === 'dataset') Object.keys(v).forEach(function (d) { el.dataset[d] = v[d]; });
      else if (k === 'width') el.style.width = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    });
    [].concat(children || []).forEach(function (c) {
      if (c === null || c === undefined || c === false) return;
      el.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
    });
    return el;
  }

  function escapeHtml(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c];
    });
  }

  function isSafeLink(uri) {
    return typeof uri === 'string' && /^https?:\/\//i.test(uri);
  }

  // ---- numbers -----------------------------------------------------------------------------

  function fmtNumber(v, decimals) {
    if (v === null || v === undefined) return NO_VALUE;
    if (typeof v !== 'number') return String(v);
    var d = decimals === undefined || decimals === null ? 4 : decimals;
    return new Intl.NumberFormat(undefined, { maximumFractionDigits: d }).format(v);
  }

  function fmtPercent(v) {
    if (v === null || v === undefined) return NO_VALUE;
    return new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 }).format(v * 100) + ' %';
  }

  function label(v) {
    if (v === null || v === undefined || v === '') return NO_VALUE;
    return String(v);
  }

  // ---- the shape of a summary --------------------------------------------------------------

  // What a metric column is, as the server states it in `metrics[].kind` (count, sum,
  // average, min, max, ratio, share; never guessed from the column's name), and how to show
  // it: a share of records (0 to 1) as a percentage, anything else as the number it is.
  function metricInfo(m) {
    var kind = m.kind;
    var label = m.unit ? m.column + ' (' + m.unit + ')' : m.column;
    return {
      column: m.column,
      label: label,
      kind: kind,
      unit: m.unit || null,
      description: m.description,
      decimals: m.rounded_to_decimals,
      additive: kind === 'count' || kind === 'sum',
      format: function (v) { return kind === 'share' ? fmtPercent(v) : fmtNumber(v, m.rounded_to_decimals); },
    };
  }

  function parameterList(v) {
    if (v === undefined || v === null) return [];
    return Array.isArray(v) ? v : [v];
  }

  // Group columns are the result's columns that are neither metrics nor their helpers.
  function summaryShape(data) {
    var metrics = (data.metrics || []).map(metricInfo);
    var metricColumns = {};
    metrics.forEach(function (m) { metricColumns[m.column] = true; });
    var fieldNames = {};
    (data.field_metadata || []).forEach(function (f) { fieldNames[f.name] = true; });
    var groups = [];
    data.columns.forEach(function (c, i) {
      if (!metricColumns[c] && fieldNames[c]) groups.push({ name: c, index: i });
    });
    var params = data.parameters || {};
    var explode = parameterList(params.explode);
    return {
      metrics: metrics,
      groups: groups,
      exploded: explode.length > 0,
      // The engine writes every parameter back, `having: []` when none was given.
      having: parameterList(params.having).length > 0,
      column: function (name) { return data.columns.indexOf(name); },
    };
  }

  // The chart a summary is drawn as, and the others it may be switched to. The same rules as
  // `tally summarize --chart` (host/chart/src/choice.rs).
  function chooseChart(data, metricIndex) {
    var shape = summaryShape(data);
    var m = shape.metrics[metricIndex || 0];
    if (!m) return { kind: 'table', kinds: ['table'], shape: shape };
    var rows = data.rows || [];
    if (shape.groups.length === 0) return { kind: 'card', kinds: ['card', 'table'], shape: shape, metric: m };
    if (rows.length === 0) return { kind: 'table', kinds: ['table'], shape: shape, metric: m };
    var col = shape.column(m.column);
    if (shape.groups.length === 1) {
      var nonNegative = rows.every(function (r) { return r[col] === null || r[col] >= 0; });
      // A share of a whole: parts that add up to the records matched. Not when records can be
      // in several parts (explode), some groups were cut (limit, having) or a value is negative.
      var share = m.additive && !shape.exploded && !data.truncated && !shape.having && nonNegative && rows.length >= 2;
      if (share) {
        var k = rows.length <= 7 ? 'pie' : 'treemap';
        return { kind: k, kinds: [k, 'bar', 'table'], shape: shape, metric: m, share: true };
      }
      return { kind: 'bar', kinds: ['bar', 'table'], shape: shape, metric: m };
    }
    if (shape.groups.length === 2) {
      var second = shape.groups[1].index;
      var distinct = {};
      rows.forEach(function (r) { distinct[label(r[second])] = true; });
      if (m.additive && Object.keys(distinct).length <= 12) {
        return { kind: 'stacked', kinds: ['stacked', 'heatmap', 'table'], shape: shape, metric: m };
      }
      return { kind: 'heatmap', kinds: m.additive ? ['heatmap', 'stacked', 'table'] : ['heatmap', 'table'], shape: shape, metric: m };
    }
    return { kind: 'table', kinds: ['table'], shape: shape, metric: m };
  }

  // ---- provenance, warnings, notes ---------------------------------------------------------

  // An answer's warnings. `omit`: warnings already shown once for the whole page (the
  // browser front says a dataset's own warnings once, not with every answer).
  function warningsBlock(env, omit) {
    var warnings = ((env.provenance && env.provenance.warnings) || []).filter(function (w) {
      return !omit || omit.indexOf(w) < 0;
    });
    if (!warnings.length) return null;
    return h('ul', { class: 'warnings', role: 'alert', 'aria-label': 'warnings' },
      warnings.map(function (w) { return h('li', { text: w }); }));
  }

  function notesBlock(data) {
    var items = [];
    (data.notes || []).forEach(function (n) {
      (n.notes || []).forEach(function (t) { items.push(n.field + ': ' + t); });
    });
    (data.dataset_notes || []).forEach(function (t) { items.push(t); });
    (data.resolved_fields || []).forEach(function (r) {
      if (r.input !== r.canonical) items.push('“' + r.input + '” was read as “' + r.canonical + '” (' + r.parameter + ')');
    });
    (data.hints || []).forEach(function (t) { items.push(t); });
    if (!items.length) return null;
    return h('ul', { class: 'notes', 'aria-label': 'notes' }, items.map(function (t) { return h('li', { text: t }); }));
  }

  function dateOnly(s) {
    return typeof s === 'string' ? s.slice(0, 10) : s;
  }

  function provenanceBlock(env, refs) {
    var p = env.provenance || {};
    var sources = p.sources || [];
    var wanted = refs && refs.length ? refs : sources.map(function (s) { return s.id; });
    var box = h('footer', { class: 'provenance', 'aria-label': 'provenance' });
    sources.filter(function (s) { return wanted.indexOf(s.id) >= 0; }).slice(0, 5).forEach(function (s) {
      var title = s.title || s.id;
      var parts = [isSafeLink(s.uri) ? h('a', { href: s.uri, target: '_blank', rel: 'noopener noreferrer', text: title }) : h('span', { text: title })];
      var bits = [];
      if (s.publisher) bits.push(s.publisher);
      if (s.locator) bits.push(s.locator);
      if (s.retrievedAt) bits.push('retrieved ' + dateOnly(s.retrievedAt));
      if (s.publishedAt) bits.push('published ' + dateOnly(s.publishedAt));
      if (s.effectiveAt) bits.push('in force ' + dateOnly(s.effectiveAt));
      if (s.license) bits.push(s.license);
      if (s.contentHash) bits.push(s.contentHash.slice(0, 19) + '…');
      if (bits.length) parts.push(' · ' + bits.join(' · '));
      box.appendChild(h('p', { class: 'source' }, [h('span', { text: 'Source: ' })].concat(parts)));
    });
    var steps = p.transformations || [];
    if (steps.length) {
      box.appendChild(h('p', { class: 'transformations', title: steps.map(function (t) { return t.type + ': ' + t.description; }).join('\n') },
        'Computed by Tally: ' + steps.map(function (t) { return t.type; }).join(' → ') +
        (p.generatedAt ? ' · ' + p.generatedAt.replace('T', ' ').slice(0, 19) : '')));
    }
    return box;
  }

  // ---- tables ------------------------------------------------------------------------------

  function columnDescriptions(data) {
    var d = {};
    (data.field_metadata || []).forEach(function (f) {
      d[f.name] = [f.description, f.role && '(' + f.role + ', ' + f.data_type + ')'].filter(Boolean).join(' ');
    });
    (data.metrics || []).forEach(function (m) { d[m.column] = m.description; });
    return d;
  }

  function table(data, formats) {
    var desc = columnDescriptions(data);
    formats = formats || {};
    var head = h('tr', null, data.columns.map(function (c) {
      return h('th', { scope: 'col', title: desc[c] || c, text: c });
    }));
    var body = h('tbody', null, (data.rows || []).map(function (r) {
      return h('tr', null, r.map(function (v, i) {
        var f = formats[data.columns[i]];
        if (v === null || v === undefined) return h('td', { class: 'null', text: '—', title: 'null' });
        if (typeof v === 'number') return h('td', { class: 'num', text: f ? f(v) : fmtNumber(v, 4), title: String(v) });
        if (Array.isArray(v) || typeof v === 'object') return h('td', { text: JSON.stringify(v) });
        return h('td', { text: String(v) });
      }));
    }));
    return h('div', { class: 'table-wrap' }, h('table', { class: 'data' }, [h('thead', null, head), body]));
  }

  // ---- charts ------------------------------------------------------------------------------

  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  function baseOption() {
    return {
      animation: false,
      backgroundColor: 'transparent',
      textStyle: { color: cssVar('--fg'), fontFamily: getComputedStyle(document.body).fontFamily },
      aria: { enabled: true },
    };
  }

  function tooltipFormatter(format) {
    return function (p) {
      var name = escapeHtml(p.name);
      var series = p.seriesName && p.seriesType !== 'pie' && p.seriesType !== 'treemap' ? escapeHtml(p.seriesName) + '<br>' : '';
      var value = Array.isArray(p.value) ? p.value[2] : p.value;
      var pct = p.percent !== undefined ? ' (' + p.percent + ' %)' : '';
      return series + name + ': <b>' + escapeHtml(format(value)) + '</b>' + pct;
    };
  }

  function mount(container, height) {
    var box = h('div', { class: 'chart', role: 'img' });
    box.style.height = height + 'px';
    container.appendChild(box);
    var chart = window.echarts.init(box, null, { renderer: 'svg' });
    if (window.ResizeObserver) new ResizeObserver(function () { chart.resize(); }).observe(box);
    return { box: box, chart: chart };
  }

  // At most this much is drawn (the same numbers as host/chart's `limits`): past them a chart
  // draws the largest groups by its metric, the rest folded into one "others" group when the
  // metric adds up (a count or a sum) or left out when it does not, and says which.
  var LIMITS = { bars: 100, stackedCategories: 60, stackedSeries: 12, heatmapRows: 60, heatmapColumns: 40, treemapTiles: 200 };

  function byCode(a, b) {
    if (a === NO_VALUE || b === NO_VALUE) return a === NO_VALUE ? (b === NO_VALUE ? 0 : 1) : -1;
    return a.localeCompare(b, undefined, { numeric: true });
  }

  // ---- what a chart draws: the largest groups, the rest as one "others" --------------------

  // A group standing for `n` groups folded into one. It reads `(1,811 others)`, as host/chart
  // writes it (`others_label`), and is a group key only in rows the chart's own calls built.
  function Others(n) { this.n = n; }
  Others.prototype.toString = function () { return '(' + fmtNumber(this.n, 0) + ' others)'; };
  function isOthers(v) { return v instanceof Others; }

  function numeric(v) { return typeof v === 'number' && isFinite(v); }

  // Largest first, what is not a number last (a sort keeps equal values in their order).
  function desc(x, y) {
    if (!numeric(x)) return numeric(y) ? 1 : 0;
    if (!numeric(y)) return -1;
    return y - x;
  }

  // The sum of values, null when none is a number (the engine's sum of nothing).
  function sumOf(values) {
    var s = 0;
    var n = 0;
    values.forEach(function (v) { if (numeric(v)) { s += v; n++; } });
    return n ? s : null;
  }

  // The largest groups of one grouping by the metric (column `col`), at most `most` drawn in
  // all: past it, `most - 1` and the rest as one "others" group when `fold` (the metric adds
  // up), else `most` and the rest left out. host/chart's `pick_groups`. A row whose group is
  // already "others" (the chart's own calls folded it, exactly) stays folded. `given`: how many
  // groups there are, when the chart knows of more than its rows (its own calls).
  function pickGroups(rows, g, col, fold, most, given) {
    var real = [];
    var folded = [];
    rows.forEach(function (r) { (isOthers(r[g]) ? folded : real).push(r); });
    real.sort(function (a, b) { return desc(a[col], b[col]); });
    var held = real.length + folded.reduce(function (n, r) { return n + r[g].n; }, 0);
    var total = Math.max(given || 0, held);
    if (total <= most && !folded.length) return { rows: real, others: null, given: total, leftOut: 0 };
    var keep = fold ? Math.max(0, most - 1) : most;
    var drawn = real.slice(0, keep);
    var rest = fold ? real.slice(keep).concat(folded) : [];
    var n = rest.reduce(function (k, r) { return k + (isOthers(r[g]) ? r[g].n : 1); }, 0);
    var others = rest.length ? { groups: n, value: sumOf(rest.map(function (r) { return r[col]; })) } : null;
    return { rows: drawn, others: others, given: total, leftOut: total - drawn.length - n };
  }

  // The values of two groupings a chart draws: the largest of each by their totals (their
  // largest value when the metric does not add up; `known.ranks`, the grouping alone, when the
  // chart's own calls asked), the first grouping's largest first, the second's in code order;
  // past `rowsMost` / `colsMost` the rest folded into one "others" row or column when `fold`
  // (their cells summed), else left out. host/chart's `pick::Grid`. `known.given`: how many
  // values each grouping has, when the chart knows of more than its rows.
  function pickPairs(rows, g1, g2, col, additive, fold, rowsMost, colsMost, known) {
    known = known || {};
    function axis(g, ranks, given, most) {
      var keys = [];
      var at = new Map();
      var rank = [];
      var othersSeen = [];
      var othersN = 0;
      rows.forEach(function (r) {
        var k = r[g];
        if (isOthers(k)) {
          if (othersSeen.indexOf(k) < 0) { othersSeen.push(k); othersN += k.n; }
          return;
        }
        var l = label(k);
        var i = at.get(l);
        if (i === undefined) { i = keys.length; at.set(l, i); keys.push(l); rank.push(additive ? 0 : null); }
        var v = r[col];
        if (numeric(v)) rank[i] = additive ? rank[i] + v : (rank[i] === null ? v : Math.max(rank[i], v));
      });
      if (ranks) keys.forEach(function (l, i) { if (ranks.has(l)) rank[i] = ranks.get(l); });
      var order = keys.map(function (_, i) { return i; });
      order.sort(function (a, b) { return desc(rank[a], rank[b]); });
      var total = Math.max(given || 0, keys.length + othersN);
      var drawn = total <= most && !othersN ? keys.length : Math.min(keys.length, fold ? Math.max(0, most - 1) : most);
      var foldedN = fold && (total > most || othersN) ? total - drawn : 0;
      return { values: order.slice(0, drawn).map(function (i) { return keys[i]; }), given: total, folded: foldedN, leftOut: total - drawn - foldedN };
    }
    var ranks = known.ranks || {};
    var given = known.given || {};
    var first = axis(g1, ranks.first, given.first, rowsMost);
    var second = axis(g2, ranks.second, given.second, colsMost);
    second.values.sort(byCode);
    [first, second].forEach(function (ax) {
      ax.labels = ax.values.slice();
      if (ax.folded) ax.labels.push(String(new Others(ax.folded)));
    });
    var firstAt = new Map(first.values.map(function (l, i) { return [l, i]; }));
    var secondAt = new Map(second.values.map(function (l, i) { return [l, i]; }));
    var otherRow = first.folded ? first.values.length : -1;
    var otherColumn = second.folded ? second.values.length : -1;
    var place = function (k, at, other) {
      if (isOthers(k)) return other;
      var i = at.get(label(k));
      return i === undefined ? other : i;
    };
    var cells = [];
    var sums = new Map();
    var foldedRows = 0;
    rows.forEach(function (r) {
      var a = place(r[g1], firstAt, otherRow);
      var b = place(r[g2], secondAt, otherColumn);
      if (a < 0 || b < 0) return;
      if (a === otherRow || b === otherColumn) {
        var key = a + ' ' + b;
        if (!sums.has(key)) sums.set(key, { a: a, b: b, values: [] });
        sums.get(key).values.push(r[col]);
        if (!isOthers(r[g1]) && !isOthers(r[g2])) foldedRows++;
      } else {
        cells.push({ a: a, b: b, value: r[col], row: r });
      }
    });
    sums.forEach(function (s) {
      cells.push({ a: s.a, b: s.b, value: sumOf(s.values), others: s.a === otherRow ? first.folded : second.folded });
    });
    cells.sort(function (x, y) { return x.a - y.a || x.b - y.b; });
    return { first: first, second: second, cells: cells, foldedRows: foldedRows };
  }

  // ---- the chart's own calls ---------------------------------------------------------------

  // What a tool result says when it is an error, in one line.
  function resultMessage(result) {
    var text = ((result && result.content) || []).filter(function (c) { return c.type === 'text'; }).map(function (c) { return c.text; }).join('\n');
    try {
      var parsed = JSON.parse(text);
      var e = parsed.error || parsed;
      return [e.message, e.hint].filter(Boolean).join(' — ') || text;
    } catch (err) {
      return text || 'the tool returned no result';
    }
  }

  // A summary's page (its limit) need not hold the groups its chart should show: the largest
  // by the charted metric, every value of a grouping that fits. With a way to call tools (the
  // host of an MCP Apps view, the browser front's client), the chart asks for them itself, from
  // the call the answer records (`provenance.query`, canonical names), ordered by the metric:
  //
  // - one grouping: its largest groups, and, when the metric adds up (a count or a sum) and
  //   some are past them, the others as one group whose value is the summary without grouping
  //   less the groups drawn;
  // - two groupings: each grouping alone, ordered by the metric (the totals of its values);
  //   the pairs of the largest values of each (by `$in`, in as many calls as the result's size
  //   budget needs); and, when the metric adds up, "others" cells from those totals less the
  //   pairs drawn (the corner from the summary without grouping).
  //
  // Every value is exact: a total of the same call, less values of the same call. What cannot
  // be had so (a metric that does not add up; a `having` or a comparison, drawn as a page of
  // their largest) is left out and said, never estimated. Resolves to null when the page holds
  // every group (the chart draws it).
  var MAX_CHART_CALLS = 40;
  function askChart(env, metricIndex, callTool) {
    var data = env.data;
    var base = env.provenance && env.provenance.query && env.provenance.query.arguments;
    var shape = summaryShape(data);
    var m = shape.metrics[metricIndex];
    var groups = shape.groups.map(function (g) { return g.name; });
    if (!base || !m || groups.length < 1 || groups.length > 2 || !(data.total_group_count > (data.rows || []).length)) {
      return Promise.resolve(null);
    }
    var calls = 0;
    function ask(changes) {
      var args = Object.assign({}, base, changes);
      Object.keys(args).forEach(function (k) { if (args[k] === undefined) delete args[k]; });
      calls++;
      return callTool('summarize_records', args).then(function (result) {
        var d = result && !result.isError && result.structuredContent && result.structuredContent.data;
        if (!d || !d.columns) throw new Error(resultMessage(result));
        return d;
      });
    }
    var metrics = [].concat(base.metrics || ['count']);
    var plain = !base.compare && metrics.indexOf(m.column) >= 0;
    if (!plain || Object.keys(base.having || {}).length > 0) {
      // A comparison's columns are not metrics it can be ordered or totalled by, and groups
      // kept by `having` have no total to take them from: the chart asks for as many as it
      // can draw, the largest first where it can order them, and draws them as a page (what
      // they do not hold is said; "others" sums those they hold).
      return ask({ limit: chartLimit(groups.length), order_by: plain ? ['-' + m.column] : base.order_by, cursor: undefined }).then(function (d) {
        return { data: d, fold: m.additive, page: true, calls: calls };
      });
    }
    if (metrics.indexOf('count') < 0) metrics.push('count');
    var fold = m.additive;
    var ordered = { metrics: metrics, order_by: ['-' + m.column], cursor: undefined };
    // The charted value, the records counted and those without a value (a sum's
    // `null_excluded_column`) of a row of `d`: enough to take values of one call from another's
    // total, exactly.
    function measure(d, r) {
      var at = function (c) { var i = d.columns.indexOf(c); return i < 0 ? null : r[i]; };
      var meta = (d.metrics || []).filter(function (x) { return x.column === m.column; })[0] || {};
      return { v: at(m.column) || 0, c: at('count') || 0, z: meta.null_excluded_column ? at(meta.null_excluded_column) || 0 : 0, nulls: !!meta.null_excluded_column };
    }
    function minus(t, parts) {
      var out = { v: t.v, c: t.c, z: t.z, nulls: t.nulls };
      parts.forEach(function (p) { out.v -= p.v; out.c -= p.c; out.z -= p.z; });
      return out;
    }
    // A row of `d`'s columns for groups folded into one, from what they hold (`t`): none when
    // they hold no record, a null value when none has one.
    function othersRow(d, keys, t) {
      if (t.c <= 0) return null;
      var r = d.columns.map(function () { return null; });
      Object.keys(keys).forEach(function (g) { r[d.columns.indexOf(g)] = keys[g]; });
      var meta = (d.metrics || []).filter(function (x) { return x.column === m.column; })[0] || {};
      r[d.columns.indexOf(m.column)] = m.column === 'count' ? t.c : (t.nulls && t.z >= t.c ? null : t.v);
      if (d.columns.indexOf('count') >= 0) r[d.columns.indexOf('count')] = t.c;
      if (meta.null_excluded_column && d.columns.indexOf(meta.null_excluded_column) >= 0) r[d.columns.indexOf(meta.null_excluded_column)] = t.z;
      return r;
    }
    function total() {
      return ask({ group_by: undefined, limit: 1, order_by: [], metrics: metrics }).then(function (d) { return measure(d, d.rows[0] || []); });
    }
    if (groups.length === 1) {
      return ask(Object.assign({ limit: chartLimit(1) }, ordered)).then(function (d) {
        var held = d.rows.length;
        if (!(d.total_group_count > held)) return { data: d, fold: m.additive, calls: calls };
        if (!fold) return { data: d, fold: false, known: { given: d.total_group_count }, calls: calls };
        return total().then(function (t) {
          var keys = {};
          keys[groups[0]] = new Others(d.total_group_count - held);
          var rest = othersRow(d, keys, minus(t, d.rows.map(function (r) { return measure(d, r); })));
          var rows = d.rows.concat(rest ? [rest] : []);
          return { data: Object.assign({}, d, { rows: rows, truncated: false, returned: rows.length }), fold: true, calls: calls };
        });
      });
    }
    var rowsMost = Math.max(LIMITS.stackedCategories, LIMITS.heatmapRows);
    var colsMost = Math.max(LIMITS.stackedSeries, LIMITS.heatmapColumns);
    return Promise.all([
      ask(Object.assign({}, ordered, { group_by: [groups[0]], limit: rowsMost })),
      ask(Object.assign({}, ordered, { group_by: [groups[1]], limit: colsMost })),
    ]).then(function (alone) {
      // Each grouping's values to draw apart: all of them when they fit, else the largest;
      // those are asked by name (`$in`), which a missing value (null) has not: it joins
      // "others", or is left out with the rest.
      var axes = alone.map(function (d, i) {
        var g = d.columns.indexOf(groups[i]);
        var most = i === 0 ? rowsMost : colsMost;
        var cut = d.total_group_count > most;
        var keep = cut ? (fold ? most - 1 : most) : d.rows.length;
        var rows = cut ? d.rows.filter(function (r) { return r[g] !== null; }).slice(0, keep) : d.rows;
        return {
          name: groups[i], cut: cut, given: d.total_group_count, rows: rows, d: d,
          values: rows.map(function (r) { return r[g]; }),
          ranks: new Map(d.rows.map(function (r) { return [label(r[g]), r[d.columns.indexOf(m.column)]]; })),
          total: function (key) {
            var r = d.rows.filter(function (x) { return label(x[g]) === label(key); })[0];
            return r ? measure(d, r) : null;
          },
        };
      });
      var where = Object.assign({}, base.where || {});
      axes.forEach(function (ax) {
        if (ax.cut) where[ax.name] = Object.assign({}, where[ax.name] || {}, { $in: ax.values });
      });
      var pairs = Object.assign({}, ordered, { where: where, limit: rowsMost * colsMost });
      return askAll(pairs, axes[0].name, axes[0].values).then(function (d) {
        var known = { given: { first: axes[0].given, second: axes[1].given }, ranks: { first: axes[0].ranks, second: axes[1].ranks } };
        var g1 = d.columns.indexOf(groups[0]);
        var g2 = d.columns.indexOf(groups[1]);
        var cutAny = axes[0].cut || axes[1].cut;
        if (!fold || !cutAny || d.incomplete) {
          // Pairs asked for that no call could hold (past the calls a chart makes) are said.
          var missing = d.incomplete ? d.total_group_count - d.rows.length : 0;
          return { data: Object.assign({}, d, { total_group_count: data.total_group_count }), fold: fold && !d.incomplete, known: known, missing: missing, calls: calls };
        }
        var cell = function (r) { return measure(d, r); };
        var rows = d.rows.slice();
        var o1 = new Others(axes[0].given - axes[0].values.length);
        var o2 = new Others(axes[1].given - axes[1].values.length);
        // Each value drawn apart, with the cells of the other grouping's values folded: its
        // total (the grouping alone) less its cells drawn.
        [[0, g1, o2], [1, g2, o1]].forEach(function (spec) {
          var ax = axes[spec[0]];
          var other = axes[1 - spec[0]];
          if (!other.cut) return;
          ax.values.forEach(function (v) {
            var t = ax.total(v);
            if (!t) return;
            var mine = d.rows.filter(function (r) { return label(r[spec[1]]) === label(v); }).map(cell);
            var keys = {};
            keys[ax.name] = v;
            keys[other.name] = spec[2];
            var r = othersRow(d, keys, minus(t, mine));
            if (r) rows.push(r);
          });
        });
        var corner = axes[0].cut && axes[1].cut ? total().then(function (t) {
          // Everything, less each value drawn apart of either grouping, plus their pairs
          // (taken away twice).
          var drawn = axes[0].values.map(axes[0].total).concat(axes[1].values.map(axes[1].total)).filter(Boolean);
          var back = d.rows.map(cell).map(function (p) { return { v: -p.v, c: -p.c, z: -p.z }; });
          var keys = {};
          keys[groups[0]] = o1;
          keys[groups[1]] = o2;
          var r = othersRow(d, keys, minus(t, drawn.concat(back)));
          if (r) rows.push(r);
        }) : Promise.resolve();
        return corner.then(function () {
          return {
            data: Object.assign({}, d, { rows: rows, truncated: false, returned: rows.length, total_group_count: data.total_group_count }),
            fold: true, known: known, calls: calls,
          };
        });
      });
    });

    // Every pair a call asks for, in several calls when one result's size budget cuts them:
    // the first grouping's values split into as many parts as the cut answer says the pairs
    // need, and again if a part is still cut (a missing value alone, asked as empty).
    function askAll(changes, field, values) {
      return ask(changes).then(function (d) {
        if (!(d.total_group_count > d.rows.length)) return d;
        if (values.length < 2 || calls >= MAX_CHART_CALLS) return Object.assign({}, d, { incomplete: true });
        var nulls = values.filter(function (v) { return v === null; });
        var named = values.filter(function (v) { return v !== null; });
        var n = Math.min(named.length, Math.max(2, Math.ceil(1.25 * d.total_group_count / Math.max(1, d.rows.length))));
        var parts = nulls.length ? [nulls] : [];
        for (var k = 0; k < n; k++) parts.push(named.slice(Math.floor(k * named.length / n), Math.floor((k + 1) * named.length / n)));
        parts = parts.filter(function (p) { return p.length; });
        var merged = Object.assign({}, d, { rows: [], total_group_count: 0, returned: 0 });
        return parts.reduce(function (done, part) {
          return done.then(function () {
            var w = Object.assign({}, changes.where || {});
            var only = part[0] === null ? { $not_empty: false } : { $in: part };
            w[field] = Object.assign({}, w[field] || {}, only);
            if (part[0] === null) delete w[field].$in;
            return askAll(Object.assign({}, changes, { where: w }), field, part).then(function (p) {
              merged.rows = merged.rows.concat(p.rows);
              merged.total_group_count += p.total_group_count;
              merged.incomplete = merged.incomplete || p.incomplete;
            });
          });
        }, Promise.resolve()).then(function () {
          merged.returned = merged.rows.length;
          return merged;
        });
      });
    }
  }

  // How many groups a chart of `groups` groupings asks for in a call of its own when it cannot
  // order them by its metric (a comparison): the most the chart could draw.
  function chartLimit(groups) {
    if (groups === 1) return Math.max(LIMITS.bars, LIMITS.treemapTiles);
    if (groups === 2) return Math.max(LIMITS.stackedCategories * LIMITS.stackedSeries, LIMITS.heatmapRows * LIMITS.heatmapColumns);
    return 0;
  }

  // ---- what a chart says it draws ----------------------------------------------------------

  // The line under a chart: what it draws and what it does not, plainly. `missing`: groups the
  // rows it was drawn from did not hold (the answer's limit or size budget); `tableHasAll`:
  // the table beside the chart has the same rows, so it shows what the chart's bounds cut.
  function scopeSentence(drawnText, cuts, missing, total, held, tableHasAll) {
    var parts = cuts.slice();
    if (missing > 0) {
      parts.push(fmtNumber(missing, 0) + ' of the ' + fmtNumber(total, 0) + ' groups that the answer did not hold (it returned ' +
        fmtNumber(held, 0) + '; raise its limit or add a condition)');
    }
    var text = 'Drawn: ' + drawnText + '.';
    if (parts.length) {
      text += ' Not drawn: ' + parts.join('; ') + '.';
      if (tableHasAll && missing === 0) text += ' The table has them all.';
    }
    return { drawn: drawnText, text: text, complete: parts.length === 0 };
  }

  // Why groups past a chart's bounds are left out rather than folded.
  function notFolded(m) {
    return m.column + ' does not add up across groups, so they are not one “others”';
  }

  // Draws the chart of `source.data` (the answer's rows, or those the chart's own calls built:
  // `source.own`) as `kind`, and says under it what it draws. Returns the chart and that
  // statement.
  function drawSummary(container, source, choice, kind, tableHasAll) {
    var data = source.data;
    var shape = choice.shape;
    var m = choice.metric;
    var col = shape.column(m.column);
    var rows = (data.rows || []).slice();
    var total = typeof data.total_group_count === 'number' ? data.total_group_count : rows.length;
    // Groups the rows do not hold: none when the chart's own calls accounted for every group.
    var missing = source.own && !source.page ? source.missing || 0 : Math.max(0, total - rows.length);
    var fold = !!source.fold;
    var countCol = shape.column('count');
    var denominator = function (r) {
      return r && m.kind === 'share' && countCol >= 0 && r[countCol] !== null ? ' (n = ' + fmtNumber(r[countCol], 0) + ')' : '';
    };
    var axisFormat = function (v) { return m.kind === 'share' ? fmtPercent(v) : fmtNumber(v, 2); };
    var opt = baseOption();
    var tip = tooltipFormatter(m.format);
    var othersColour = cssVar('--others');
    var summed = source.own && !source.page ? 'their exact total' : 'their sum';
    var target;
    var scope;
    if (kind === 'bar' || kind === 'pie' || kind === 'treemap') {
      var g = shape.groups[0].index;
      var name = shape.groups[0].name;
      var most = kind === 'bar' ? LIMITS.bars : kind === 'treemap' ? LIMITS.treemapTiles : Infinity;
      // A tile's area is its value: what has none is not a tile (host/chart draws the same).
      var pool = kind === 'treemap' ? rows.filter(function (r) { return isOthers(r[g]) || (numeric(r[col]) && r[col] > 0); }) : rows;
      var arealess = rows.length - pool.length;
      var picked = pickGroups(pool, g, col, fold, most, source.known && source.known.given);
      var items = picked.rows.map(function (r) { return { name: label(r[g]), value: r[col], row: r }; });
      if (picked.others) items.push({ name: String(new Others(picked.others.groups)), value: picked.others.value, others: picked.others.groups });
      var whole = items.reduce(function (s, i) { return s + (numeric(i.value) ? i.value : 0); }, 0);
      var share = function (v) { return whole > 0 ? fmtNumber(100 * v / whole, 1) + ' %' : ''; };
      var n = fmtNumber(picked.rows.length, 0);
      var drawnText = !missing && !picked.others && !picked.leftOut ? 'all ' + n + ' groups of ' + name
        : 'the ' + n + ' largest of ' + fmtNumber(picked.given, 0) + ' groups of ' + name + ' by ' + m.column;
      if (picked.others) {
        drawnText += ', and the other ' + fmtNumber(picked.others.groups, 0) + ' as one ' + (kind === 'treemap' ? 'tile' : 'bar') + ', “' +
          items[items.length - 1].name + '”, ' + summed;
      }
      var cuts = [];
      if (picked.leftOut) {
        cuts.push('the other ' + fmtNumber(picked.leftOut, 0) + ', past the ' + most + ' a ' + kind + ' chart draws (' + notFolded(m) + ')');
      }
      if (arealess) cuts.push(fmtNumber(arealess, 0) + ' of no value or 0 (no area)');
      scope = scopeSentence(drawnText, cuts, missing, total, rows.length, tableHasAll);
      var styled = function (i) {
        return i.others ? { name: i.name, value: i.value, others: i.others, itemStyle: { color: othersColour } } : { name: i.name, value: i.value };
      };
      if (kind === 'bar') {
        target = mount(container, Math.max(220, items.length * 26 + 70));
        opt.grid = { left: 8, right: 80, top: 30, bottom: 30, containLabel: true };
        opt.tooltip = { trigger: 'item', formatter: tip };
        opt.xAxis = { type: 'value', name: m.label, nameLocation: 'middle', nameGap: 22, axisLabel: { formatter: axisFormat } };
        opt.yAxis = { type: 'category', inverse: true, data: items.map(function (i) { return i.name; }), name: shape.groups[0].name, nameLocation: 'start', nameTextStyle: { fontWeight: 'bold', align: 'right' }, axisLabel: { width: 220, overflow: 'truncate' } };
        opt.series = [{
          type: 'bar', name: m.column,
          data: items.map(function (i) { return i.others ? styled(i) : i.value; }),
          itemStyle: { color: cssVar('--bar') },
          label: { show: true, position: 'right', formatter: function (p) { return m.format(Array.isArray(p.value) ? p.value[0] : p.value) + denominator(items[p.dataIndex].row); } },
        }];
      } else if (kind === 'pie') {
        target = mount(container, 320);
        opt.tooltip = { trigger: 'item', formatter: tip };
        opt.series = [{
          type: 'pie', name: m.column, radius: ['30%', '65%'],
          data: items.map(styled),
          // A function, not a template: a template would read `{…}` or `$&` in a group's name.
          label: { formatter: function (p) { return p.name + ': ' + share(p.value); } },
        }];
      } else {
        target = mount(container, 380);
        opt.tooltip = { formatter: tip };
        opt.series = [{
          // Every group gets its tile, however small (ECharts hides tiles under 10 px² by default).
          type: 'treemap', name: m.column, roam: false, nodeClick: false, breadcrumb: { show: false }, visibleMin: 0,
          data: items.map(styled),
          label: { formatter: function (p) { return p.name + '\n' + m.format(p.value) + ' · ' + share(p.value); } },
        }];
      }
    } else if (kind === 'stacked' || kind === 'heatmap') {
      var g1 = shape.groups[0].index;
      var g2 = shape.groups[1].index;
      var rowsMost = kind === 'stacked' ? LIMITS.stackedCategories : LIMITS.heatmapRows;
      var colsMost = kind === 'stacked' ? LIMITS.stackedSeries : LIMITS.heatmapColumns;
      var grid = pickPairs(rows, g1, g2, col, m.additive, fold, rowsMost, colsMost, source.known);
      var firstKeys = grid.first.labels;
      var secondKeys = grid.second.labels;
      var apart = grid.cells.filter(function (c) { return !c.others; }).length;
      // Pairs in "others" cells: every pair not drawn apart when the chart's own calls
      // accounted for all of them, else the rows summed into those cells.
      var foldedPairs = fold && source.own && !source.page && !missing ? total - apart : grid.foldedRows;
      var axisText = function (ax, name) {
        var k = fmtNumber(ax.values.length, 0);
        if (ax.folded) return 'the ' + k + ' largest of ' + fmtNumber(ax.given, 0) + ' ' + name + ' and “' + ax.labels[ax.labels.length - 1] + '”, ' + summed;
        if (ax.leftOut) return 'the ' + k + ' largest of ' + fmtNumber(ax.given, 0) + ' ' + name + ' by ' + m.column;
        return k + ' ' + name;
      };
      var chartName = kind === 'stacked' ? 'stacked' : 'heatmap';
      var pairCuts = [];
      [[grid.first, shape.groups[0].name, rowsMost], [grid.second, shape.groups[1].name, colsMost]].forEach(function (a) {
        if (a[0].leftOut) {
          pairCuts.push('the other ' + fmtNumber(a[0].leftOut, 0) + ' ' + a[1] + ', past the ' + a[2] + ' a ' + chartName + ' chart draws (' + notFolded(m) + ')');
        }
      });
      scope = scopeSentence(axisText(grid.first, shape.groups[0].name) + ' × ' + axisText(grid.second, shape.groups[1].name) +
        ' (' + fmtNumber(apart, 0) + ' of ' + fmtNumber(total, 0) + ' pairs' + (foldedPairs > 0 ? ', ' + fmtNumber(foldedPairs, 0) + ' more in “others”' : '') + ')' +
        (missing && m.additive && kind === 'stacked' ? '; bars lack the pairs not answered, so they may be short' : ''), pairCuts, missing, total, rows.length, tableHasAll);
      var otherSeries = grid.second.folded ? secondKeys.length - 1 : -1;
      if (kind === 'stacked') {
        target = mount(container, Math.max(240, firstKeys.length * 28 + 110));
        opt.legend = { type: 'scroll', top: 0 };
        opt.grid = { left: 8, right: 30, top: 60, bottom: 30, containLabel: true };
        opt.tooltip = { trigger: 'item', formatter: tip };
        opt.xAxis = { type: 'value', name: m.label, nameLocation: 'middle', nameGap: 22, axisLabel: { formatter: axisFormat } };
        opt.yAxis = { type: 'category', inverse: true, data: firstKeys, name: shape.groups[0].name, nameLocation: 'start', nameTextStyle: { fontWeight: 'bold', align: 'right' }, axisLabel: { width: 220, overflow: 'truncate' } };
        var series = secondKeys.map(function (b, i) {
          var s = { type: 'bar', stack: 'total', name: b, data: firstKeys.map(function () { return null; }) };
          if (i === otherSeries) s.itemStyle = { color: othersColour };
          return s;
        });
        grid.cells.forEach(function (c) { series[c.b].data[c.a] = c.value; });
        opt.series = series;
      } else {
        target = mount(container, Math.max(260, firstKeys.length * 26 + 120));
        // A cell only where the result has a value: an absent combination, or a null, shows
        // the grid's grey, unlike a 0. Cells of "others" are grey-blue, apart from the colour
        // scale: they stand for many groups and would pale every other cell.
        var cells = grid.cells.filter(function (c) { return numeric(c.value) && !c.others; }).map(function (c) { return [c.b, c.a, c.value]; });
        var folded = grid.cells.filter(function (c) { return numeric(c.value) && c.others; }).map(function (c) { return { value: [c.b, c.a, c.value], others: c.others }; });
        var values = cells.map(function (c) { return c[2]; });
        opt.tooltip = {
          formatter: function (p) {
            return escapeHtml(firstKeys[p.value[1]]) + ' × ' + escapeHtml(secondKeys[p.value[0]]) + ': <b>' + escapeHtml(m.format(p.value[2])) + '</b>';
          },
        };
        opt.grid = { left: 8, right: 20, top: 60, bottom: 50, containLabel: true, show: true, backgroundColor: cssVar('--absent'), borderWidth: 0 };
        // Every column named (ECharts would skip labels that overlap, "others" among them):
        // upright past a dozen columns, as host/chart turns them.
        opt.xAxis = { type: 'category', position: 'top', data: secondKeys, name: shape.groups[1].name, axisLabel: { interval: 0, rotate: secondKeys.length > 12 ? 90 : secondKeys.length > 6 ? 30 : 0, width: 120, overflow: 'truncate' } };
        opt.yAxis = { type: 'category', inverse: true, data: firstKeys, name: shape.groups[0].name, axisLabel: { width: 200, overflow: 'truncate' } };
        opt.visualMap = {
          seriesIndex: 0,
          min: values.length ? values.reduce(function (a, b) { return Math.min(a, b); }) : 0,
          max: values.length ? values.reduce(function (a, b) { return Math.max(a, b); }) : 1,
          calculable: false, orient: 'horizontal', left: 'center', bottom: 0,
          inRange: { color: [cssVar('--heat-low'), cssVar('--heat-high')] },
          formatter: function (v) { return m.format(v); },
        };
        var cellLabel = { show: firstKeys.length * secondKeys.length <= 300, fontSize: 10, formatter: function (p) { return m.format(p.value[2]); } };
        opt.series = [{ type: 'heatmap', name: m.column, data: cells, label: cellLabel }];
        if (folded.length) opt.series.push({ type: 'heatmap', name: m.column + ' (others)', data: folded, itemStyle: { color: othersColour }, label: cellLabel });
      }
    }
    target.box.setAttribute('aria-label', kind + ' chart of ' + m.column + ' by ' + shape.groups.map(function (g) { return g.name; }).join(' and '));
    target.box.dataset.kind = kind;
    target.chart.setOption(opt);
    container.appendChild(h('p', {
      class: 'chart-scope' + (scope.complete ? ' muted' : ' left-out'),
      dataset: { complete: String(scope.complete), from: source.own ? 'calls' : 'answer' },
      text: scope.text,
    }));
    return { target: target, scope: scope };
  }

  function cards(data, shape) {
    var row = (data.rows || [])[0] || [];
    var countCol = shape.column('count');
    return h('div', { class: 'cards' }, shape.metrics.map(function (m) {
      var v = row[shape.column(m.column)];
      var n = m.kind === 'share' && countCol >= 0 ? 'of ' + fmtNumber(row[countCol], 0) + ' records' : null;
      return h('div', { class: 'card', dataset: { metric: m.column } }, [
        h('div', { class: 'label', text: m.label }),
        h('div', { class: 'figure', text: m.format(v) }),
        h('div', { class: 'label', text: m.description }),
        n && h('div', { class: 'label', text: n }),
      ]);
    }));
  }

  // ---- the views ---------------------------------------------------------------------------

  // What a result is about: its first source's title (the dataset's), else its id.
  function titleOf(env, fallback) {
    var sources = (env.provenance && env.provenance.sources) || [];
    return (sources[0] && sources[0].title) || fallback;
  }

  function header(title, subtitle) {
    return [h('h2', { text: title }), subtitle ? h('p', { class: 'subtitle', text: subtitle }) : null];
  }

  // The chart's own calls of each answer drawn, by metric (see renderSummary).
  var chartCalls = new WeakMap();

  // The answer's warnings that are about its page (its limit, its size budget): above a chart
  // drawn from calls of its own, they are not about what is drawn.
  function pageWarning(w) {
    return /^\d+ of \d+ groups returned \(limit \d+\)/.test(w) || /^the result was cut to \d+ groups to /.test(w);
  }

  function renderSummary(root, env, opts) {
    var data = env.data;
    // A comparison of periods is charted by its first change (what was asked); the same rule
    // as `default_metric` in host/chart/src/lib.rs.
    var firstChange = (data.metrics || []).map(function (m) { return m.kind; }).indexOf('change');
    // `chosen`: the kind a person picked; else each draw takes the one the data it draws gives.
    var state = { metric: firstChange < 0 ? 0 : firstChange, kind: null, chosen: false };
    var shape0 = summaryShape(data);
    var by = shape0.groups.map(function (g) { return g.name; });
    var subtitle = fmtNumber(data.total_records, 0) + ' records' +
      (by.length ? ' · ' + fmtNumber(data.total_group_count, 0) + ' groups by ' + by.join(' × ') : '') +
      (data.truncated ? ' · the first ' + fmtNumber(data.returned, 0) + ' shown' : '') +
      (shape0.exploded ? ' · a record can be in several parts: the parts do not add up to the records' : '');
    header(titleOf(env, data.dataset_id), subtitle).forEach(function (e) { if (e) root.appendChild(e); });
    var warnBox = h('div', { class: 'warnings-box' });
    var toolbar = h('div', { class: 'toolbar', role: 'toolbar' });
    var body = h('div', { class: 'body' });
    root.appendChild(warnBox);
    root.appendChild(toolbar);
    root.appendChild(body);
    var formats = {};
    shape0.metrics.forEach(function (m) { formats[m.column] = m.format; });
    var current = null;
    // When the page does not hold every group and the view can call tools, a chart asks for
    // its groups in calls of its own (askChart), one metric at a time, as it is drawn; the
    // table is the page asked for.
    var canAsk = !!opts.callTool && shape0.groups.length >= 1 && shape0.groups.length <= 2 &&
      data.total_group_count > (data.rows || []).length;
    // Kept with the answer: a view drawn again (the host's theme changed) asks nothing again.
    var asked = chartCalls.get(env) || {};
    chartCalls.set(env, asked);
    var waiting = {};
    function sourceFor(i) {
      var page = { data: data, fold: !!(shape0.metrics[i] && shape0.metrics[i].additive) };
      if (!canAsk) return { source: page };
      if (!asked[i]) {
        var entry = asked[i] = { pending: true };
        entry.promise = askChart(env, i, opts.callTool).then(function (s) {
          entry.source = s ? Object.assign({ own: true }, s) : page;
        }, function (e) {
          entry.source = page;
          entry.failed = String((e && e.message) || e);
        }).then(function () { entry.pending = false; });
      }
      if (asked[i].pending && !waiting[i]) {
        waiting[i] = true;
        asked[i].promise.then(function () {
          if (state.metric === i && root.contains(body)) draw();
        });
      }
      return asked[i];
    }

    function warnings(shows) {
      warnBox.textContent = '';
      var list = ((env.provenance && env.provenance.warnings) || []).filter(function (w) {
        return !opts.omitWarnings || opts.omitWarnings.indexOf(w) < 0;
      });
      var items = list.map(function (w) { return h('li', { text: w }); });
      if (shows) {
        items = [h('li', { class: 'chart-shows', text: shows.text })].concat(
          list.filter(function (w) { return !shows.replacesPage || !pageWarning(w); }).map(function (w) { return h('li', { text: w }); }));
      }
      if (items.length) warnBox.appendChild(h('ul', { class: 'warnings', role: 'alert', 'aria-label': 'warnings' }, items));
    }

    function draw() {
      var got = sourceFor(state.metric);
      var chartData = got.source ? got.source.data : data;
      var choice = chooseChart(chartData, state.metric);
      if (!state.chosen || choice.kinds.indexOf(state.kind) < 0) state.kind = choice.kind;
      toolbar.textContent = '';
      if (shape0.metrics.length > 1 && shape0.groups.length > 0) {
        var select = h('select', { 'aria-label': 'metric', on: { change: function (e) { state.metric = Number(e.target.value); draw(); } } },
          shape0.metrics.map(function (m, i) { return h('option', { value: String(i), selected: i === state.metric, text: m.column }); }));
        toolbar.appendChild(select);
      }
      toolbar.appendChild(h('span', { class: 'spacer' }));
      choice.kinds.forEach(function (k) {
        toolbar.appendChild(h('button', {
          type: 'button', 'aria-pressed': k === state.kind ? 'true' : 'false', dataset: { kind: k },
          text: { card: 'Figures', bar: 'Bar', pie: 'Pie', treemap: 'Treemap', stacked: 'Stacked bar', heatmap: 'Heatmap', table: 'Table' }[k],
          on: { click: function () { state.kind = k; state.chosen = true; draw(); } },
        }));
      });
      if (current && current.chart) current.chart.dispose();
      current = null;
      body.textContent = '';
      var shows = null;
      if (state.kind === 'table') body.appendChild(table(data, formats));
      else if (state.kind === 'card') body.appendChild(cards(data, choice.shape));
      else if (got.pending) body.appendChild(h('p', { class: 'muted chart-pending', text: 'Asking for the groups the chart shows…' }));
      else {
        var source = got.source;
        var drawn = drawSummary(body, source, choice, state.kind, !source.own);
        current = drawn.target;
        if (source.own) {
          // What is drawn is not the page the answer's own warnings are about.
          shows = {
            replacesPage: true,
            text: 'The chart shows ' + drawn.scope.text.replace(/^Drawn: /, '') +
              ' It was asked in ' + fmtNumber(source.calls, 0) + (source.calls === 1 ? ' call' : ' calls') + ' of its own; the table is the page asked for: ' +
              fmtNumber(data.returned, 0) + ' of ' + fmtNumber(data.total_group_count, 0) + ' groups.',
          };
        } else if (got.failed) {
          shows = { replacesPage: false, text: 'The chart could not ask for its groups (' + got.failed + '): it is drawn from the page, ' + drawn.scope.text.replace(/^Drawn: /, '') };
        }
      }
      warnings(shows);
      if (choice.metric && (choice.metric.kind === 'share' || choice.metric.kind === 'ratio')) {
        var rate = choice.metric.kind === 'share';
        body.appendChild(h('p', { class: 'muted', text: choice.metric.column + ' = ' + choice.metric.description +
          (rate ? ', shown as a percentage' + (choice.shape.column('count') >= 0 ? '; n = records in the group' : '') : '') }));
      }
      root.dataset.kind = state.kind;
    }
    draw();
    var notes = notesBlock(data);
    if (notes) root.appendChild(notes);
    root.appendChild(provenanceBlock(env, data.sourceRefs));
  }

  // The columns an answer left out, one line per reason (a default page of a wide dataset
  // leaves out many, all for the same reason), folded: the answer's warning already says so.
  function omittedColumns(omitted) {
    if (!omitted.length) return null;
    var reasons = [];
    var fields = {};
    omitted.forEach(function (o) {
      if (!fields[o.reason]) { fields[o.reason] = []; reasons.push(o.reason); }
      fields[o.reason].push(o.field);
    });
    return h('details', { class: 'omitted muted' }, [
      h('summary', { text: omitted.length === 1 ? '1 column left out' : omitted.length + ' columns left out' }),
      h('ul', null, reasons.map(function (r) {
        return h('li', { text: fields[r].join(', ') + ': ' + r });
      })),
    ]);
  }

  function renderQuery(root, env, args, opts) {
    var data = env.data;
    var first = data.offset + 1;
    var last = data.offset + data.returned;
    header(titleOf(env, data.dataset_id), data.total === 0 ? 'no records match' :
      'records ' + fmtNumber(first, 0) + '–' + fmtNumber(last, 0) + ' of ' + fmtNumber(data.total, 0)).forEach(function (e) { if (e) root.appendChild(e); });
    var warn = warningsBlock(env, opts.omitWarnings);
    if (warn) root.appendChild(warn);
    root.appendChild(table(data));
    var omitted = omittedColumns(data.omitted_columns || []);
    if (omitted) root.appendChild(omitted);
    var pager = pagerFor(root, 'query_records', args, data, opts);
    if (pager) root.appendChild(pager);
    var notes = notesBlock(data);
    if (notes) root.appendChild(notes);
    root.appendChild(provenanceBlock(env, data.sourceRefs));
  }

  // The most frequent values as inspect_dataset sends them under `top_values`: objects
  // `{value, count}` in its full form, `[value, count]` pairs in its compact form.
  function topValues(list) {
    return (list || []).map(function (t) {
      return Array.isArray(t) ? { value: t[0], count: t[1] } : { value: t.value, count: t.count };
    });
  }

  // A field's codes (a static codelist, with descriptions in full) or its most frequent values.
  function codesOf(f) {
    var c = f.codelist;
    if (c && c.codes) {
      return c.codes.map(function (x) { return typeof x === 'string' ? { value: x } : x; });
    }
    var top = (c && c.top_values) || (f.values && f.values.top_values);
    if (top) return topValues(top).map(function (t) { return { value: label(t.value), count: t.count }; });
    return null;
  }

  // How many distinct values a field has, when inspect_dataset says.
  function distinctOf(f) {
    var c = f.codelist;
    var n = (c && c.distinct_count !== undefined) ? c.distinct_count : (f.values && f.values.distinct_count);
    return typeof n === 'number' ? n : null;
  }

  function renderInspect(root, env, opts) {
    var data = env.data;
    header(data.title || data.dataset_id, data.dataset_id + ' · ' + fmtNumber(data.record_count, 0) + ' records' +
      (data.publisher ? ' · ' + data.publisher : '') + (data.as_of_date ? ' · as of ' + data.as_of_date : '')).forEach(function (e) { if (e) root.appendChild(e); });
    var warn = warningsBlock(env, opts.omitWarnings);
    if (warn) root.appendChild(warn);
    if (data.description) root.appendChild(h('p', { text: data.description }));
    ['id', 'dim', 'measure', 'attr'].forEach(function (role) {
      var fields = data.fields.filter(function (f) { return f.role === role; });
      if (!fields.length) return;
      root.appendChild(h('h3', { text: { id: 'Identifier', dim: 'Dimensions', measure: 'Measures', attr: 'Attributes' }[role] + ' (' + fields.length + ')' }));
      root.appendChild(h('div', { class: 'fields', dataset: { role: role } }, fields.map(function (f) {
        var pct = Math.round(f.fill_rate * 1000) / 10;
        var bar = h('span');
        bar.style.width = pct + '%';
        var codes = codesOf(f);
        var parts = [
          h('div', null, [h('span', { class: 'name', text: f.name }), ' ', h('span', { class: 'role', text: f.data_type })]),
          h('div', { class: 'fill', role: 'meter', 'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': String(pct), title: 'filled in ' + pct + ' % of records' }, bar),
          h('div', { class: 'fill-label', text: pct + ' % filled' + (f.quality ? ' (' + f.quality + ')' : '') }),
        ];
        if (f.description) parts.push(h('div', { class: 'desc', text: f.description }));
        if (f.stats) {
          parts.push(h('div', { class: 'desc', text: 'min ' + fmtNumber(Number(f.stats.min), 2) + ' · max ' + fmtNumber(Number(f.stats.max), 2) + ' · mean ' + fmtNumber(f.stats.mean, 2) + (f.stats.zero_count !== null ? ' · zeros ' + fmtNumber(f.stats.zero_count, 0) : '') }));
        }
        (f.notes || []).forEach(function (n) { parts.push(h('div', { class: 'desc', text: '⚠ ' + n })); });
        if (codes && codes.length) {
          parts.push(h('details', { class: 'codes' }, [
            h('summary', { text: f.codelist && f.codelist.codes ? codes.length + ' codes'
              : distinctOf(f) !== null && distinctOf(f) > codes.length ? 'the ' + codes.length + ' most frequent of ' + fmtNumber(distinctOf(f), 0) + ' values'
                : codes.length + ' values' }),
            h('ul', null, codes.map(function (c) {
              return h('li', { text: c.value + (c.description ? ' — ' + c.description : '') + (c.count !== undefined ? ' (' + fmtNumber(c.count, 0) + ')' : '') });
            })),
          ]));
        }
        return h('div', { class: 'field', dataset: { field: f.name } }, parts);
      })));
    });
    if ((data.computed_measures || []).length) {
      root.appendChild(h('h3', { text: 'Computed measures' }));
      root.appendChild(h('ul', null, data.computed_measures.map(function (m) {
        return h('li', { text: m.metric + ' = ' + m.formula + (m.description ? ' — ' + m.description : '') });
      })));
    }
    if ((data.undeclared_columns || []).length) {
      root.appendChild(h('p', { class: 'muted', text: 'Not served (not in dataset.yaml): ' + data.undeclared_columns.join(', ') }));
    }
    var notes = notesBlock(data);
    if (notes) root.appendChild(notes);
    root.appendChild(provenanceBlock(env, data.sourceRefs));
  }

  function renderList(root, env, args, opts) {
    var data = env.data;
    header('Datasets', fmtNumber(data.total, 0) + ' served').forEach(function (e) { if (e) root.appendChild(e); });
    var warn = warningsBlock(env, opts.omitWarnings);
    if (warn) root.appendChild(warn);
    root.appendChild(h('div', { class: 'cards' }, data.datasets.map(function (d) {
      var open = opts.openDataset;
      return h('div', {
        class: 'card' + (open ? ' clickable' : ''), dataset: { dataset: d.dataset_id }, tabindex: open ? '0' : null, role: open ? 'button' : null,
        on: open ? { click: function () { open(d.dataset_id); }, keydown: function (e) { if (e.key === 'Enter') open(d.dataset_id); } } : {},
      }, [
        h('h3', { text: d.title }),
        h('div', { class: 'meta', text: d.dataset_id + (d.publisher ? ' · ' + d.publisher : '') }),
        h('div', { class: 'figure', text: fmtNumber(d.record_count, 0) }),
        h('div', { class: 'label', text: 'records · ' + d.field_count + ' fields' + (d.as_of_date ? ' · as of ' + d.as_of_date : '') }),
        d.description ? h('div', { class: 'label', text: d.description }) : null,
        d.license ? h('div', { class: 'label', text: d.license }) : null,
      ]);
    })));
    (data.broken_datasets || []).forEach(function (b) {
      root.appendChild(h('div', { class: 'error', text: (b.dataset_id || b.id || '') + ': ' + (b.error || JSON.stringify(b)) }));
    });
    root.appendChild(provenanceBlock(env));
  }

  // A pager that calls `tool` again with the answer's cursor (through the host, or the
  // front's client), drawing the page it gets in place of this one.
  function pagerFor(root, tool, args, data, opts) {
    var call = opts.callTool;
    if (!call) return null;
    var pager = h('div', { class: 'pager' });
    var history = opts.history || [];
    function go(cursor, nextHistory) {
      var next = Object.assign({}, args);
      if (cursor) next.cursor = cursor; else delete next.cursor;
      pager.querySelectorAll('button').forEach(function (b) { b.disabled = true; });
      call(tool, next).then(function (result) {
        render(root, tool, next, result, Object.assign({}, opts, { history: nextHistory }));
      }, function (e) {
        pager.appendChild(h('span', { class: 'error', text: String(e && e.message || e) }));
      });
    }
    pager.appendChild(h('button', {
      type: 'button', class: 'small', 'data-page': 'previous', disabled: history.length === 0,
      text: '‹ Previous', on: { click: function () { var hist = history.slice(0, -1); go(history[history.length - 1], hist); } },
    }));
    pager.appendChild(h('button', {
      type: 'button', class: 'small', 'data-page': 'next', disabled: !data.next_cursor,
      text: 'Next ›', on: { click: function () { go(data.next_cursor, history.concat([args.cursor || null])); } },
    }));
    return pager;
  }

  // cite_provisions: each provision with its law, locator, text, revision, e-Gov link and the
  // records resting on it (per group when grouped); then the references that found nothing,
  // by reason.
  function renderCite(root, env, args, opts) {
    var data = env.data;
    var col = function (name) { return data.columns.indexOf(name); };
    var lawCol = col('law');
    var groupCols = data.columns.slice(0, lawCol < 0 ? 0 : lawCol);
    var first = data.offset + 1;
    var last = data.offset + data.returned;
    header('Provisions cited by ' + titleOf(env, data.dataset_id),
      fmtNumber(data.records_matched, 0) + ' of ' + fmtNumber(data.records_total, 0) + ' records find a provision in ' + data.linked_dataset +
      (data.as_of ? ' as of ' + data.as_of : ' (latest revisions)') + ' · ' +
      (data.total_provisions === 0 ? 'no provisions' : 'provisions ' + fmtNumber(first, 0) + '–' + fmtNumber(last, 0) + ' of ' + fmtNumber(data.total_provisions, 0))
    ).forEach(function (e) { if (e) root.appendChild(e); });
    var warn = warningsBlock(env, opts.omitWarnings);
    if (warn) root.appendChild(warn);
    var cell = function (r, name) { var i = col(name); return i < 0 ? null : r[i]; };
    root.appendChild(h('ol', { class: 'provisions', start: String(first), 'aria-label': 'provisions' }, (data.rows || []).map(function (r) {
      var uri = cell(r, 'uri');
      var groups = groupCols.map(function (g) { return g + ': ' + label(r[data.columns.indexOf(g)]); });
      var records = cell(r, 'records');
      return h('li', { class: 'provision', dataset: { provision: String(cell(r, 'provision') || '') } }, [
        h('div', { class: 'provision-head' }, [
          h('span', { class: 'law', text: label(cell(r, 'law')) }), ' ',
          h('span', { class: 'locator', text: label(cell(r, 'provision')) }),
          h('span', { class: 'spacer' }),
          h('span', { class: 'records', title: 'records resting on this provision', text: fmtNumber(records, 0) + (records === 1 ? ' record' : ' records') }),
        ]),
        groups.length ? h('div', { class: 'groups muted', text: groups.join(' · ') }) : null,
        h('blockquote', { class: 'text', text: label(cell(r, 'text')) }),
        h('div', { class: 'revision muted' }, [
          'revision ' + label(cell(r, 'revision')) + ' · ',
          isSafeLink(uri) ? h('a', { href: uri, target: '_blank', rel: 'noopener noreferrer', text: 'e-Gov' }) : h('span', { text: label(uri) }),
        ]),
      ]);
    })));
    var pager = pagerFor(root, 'cite_provisions', args, data, opts);
    if (pager) root.appendChild(pager);
    if ((data.unmatched || []).length) {
      root.appendChild(h('h3', { text: 'References that found no provision' }));
      root.appendChild(h('div', { class: 'unmatched' }, data.unmatched.map(function (u) {
        return h('details', { class: 'unmatched-reason', dataset: { reason: u.reason } }, [
          h('summary', { text: u.reason + ': ' + fmtNumber(u.records, 0) + (u.records === 1 ? ' record' : ' records') }),
          h('ul', null, (u.references || []).map(function (ref) {
            return h('li', { text: (ref.values || []).map(label).join(' · ') + (ref.provision ? ' → ' + ref.provision : '') + ' (' + fmtNumber(ref.records, 0) + ')' });
          })),
        ]);
      })));
    }
    var notes = notesBlock(data);
    if (notes) root.appendChild(notes);
    // Every source: the dataset, the law dataset and each law revision cited (rowSourceRefs).
    root.appendChild(provenanceBlock(env));
  }

  var VERIFY_STATUS = {
    identical: { text: 'Identical', tone: 'ok', says: 'the same data gives the same numbers' },
    data_changed: { text: 'Data changed', tone: 'warn', says: 'a source changed since the answer was made' },
    altered: { text: 'Altered', tone: 'bad', says: "the answer's numbers do not match its own resultHash" },
    not_reproducible: { text: 'Not reproducible', tone: 'bad', says: 'the call cannot be asked again as it was' },
  };

  function shortHash(v) {
    return typeof v === 'string' && v.length > 23 ? v.slice(0, 19) + '…' : label(v);
  }

  function valueCell(v, cls) {
    if (v === null || v === undefined) return h('td', { class: 'null ' + cls, text: '—', title: 'null' });
    if (typeof v === 'number') return h('td', { class: 'num ' + cls, text: fmtNumber(v, 4), title: String(v) });
    if (typeof v === 'object') return h('td', { class: cls, text: JSON.stringify(v) });
    return h('td', { class: cls, text: String(v) });
  }

  // The summary after its badge: "identical: …" beside the badge "Identical" says it twice.
  function verdictText(summary, st) {
    if (!summary) return st.says;
    var prefix = st.text.toLowerCase() + ':';
    return summary.toLowerCase().indexOf(prefix) === 0 ? summary.slice(prefix.length).trim() : summary;
  }

  // verify_answer: the status, why, each source then and now, and every changed value with
  // the answer's number beside the one computed now.
  function renderVerify(root, env) {
    var data = env.data;
    var st = VERIFY_STATUS[data.status] || { text: String(data.status), tone: 'bad', says: '' };
    header('Verification of a ' + data.tool + ' answer', 'made with ' + data.recorded_with + ', checked with ' + data.verified_with)
      .forEach(function (e) { if (e) root.appendChild(e); });
    root.appendChild(h('div', { class: 'verdict ' + st.tone, role: 'status', dataset: { status: data.status } }, [
      h('span', { class: 'badge', text: st.text }), ' ',
      h('span', { text: verdictText(data.summary, st) }),
    ]));
    var warn = warningsBlock(env);
    if (warn) root.appendChild(warn);
    root.appendChild(h('p', { class: 'muted', text: 'resultHash ' + (data.result_hash_matches ? 'matches the answer’s data' : 'does not match the answer’s data: it was edited after Tally made it') }));
    if ((data.reasons || []).length) {
      root.appendChild(h('ul', { class: 'reasons', 'aria-label': 'why' }, data.reasons.map(function (r) { return h('li', { text: r }); })));
    }
    if ((data.changes || []).length) {
      root.appendChild(h('h3', { text: data.changes_total > data.changes.length
        ? fmtNumber(data.changes_total, 0) + ' values differ (the first ' + fmtNumber(data.changes.length, 0) + ' listed)'
        : fmtNumber(data.changes_total, 0) + (data.changes_total === 1 ? ' value differs' : ' values differ') }));
      root.appendChild(h('div', { class: 'table-wrap narrow' }, h('table', { class: 'data changes' }, [
        h('thead', null, h('tr', null, [
          h('th', { scope: 'col', text: 'where' }),
          h('th', { scope: 'col', text: 'in the answer' }),
          h('th', { scope: 'col', text: 'now' }),
        ])),
        h('tbody', null, data.changes.map(function (c) {
          return h('tr', { dataset: { path: c.path } }, [h('td', { text: c.at, title: c.path }), valueCell(c.old, 'old'), valueCell(c.new, 'new')]);
        })),
      ])));
    } else if (data.status === 'identical') {
      root.appendChild(h('p', { text: 'No value differs.' }));
    }
    if ((data.sources || []).length) {
      root.appendChild(h('h3', { text: 'Sources, then and now' }));
      root.appendChild(h('div', { class: 'table-wrap' }, h('table', { class: 'data sources' }, [
        h('thead', null, h('tr', null, ['source', 'version then', 'version now', 'hash then', 'hash now', 'changed'].map(function (t) {
          return h('th', { scope: 'col', text: t });
        }))),
        h('tbody', null, data.sources.map(function (src) {
          return h('tr', { class: src.changed ? 'changed' : null, dataset: { source: src.id } }, [
            h('td', { text: src.id, title: src.note || '' }),
            h('td', { text: label(src.recorded_version) }),
            h('td', { text: label(src.current_version) }),
            h('td', { text: shortHash(src.recorded_hash), title: src.recorded_hash || '' }),
            h('td', { text: shortHash(src.current_hash), title: src.current_hash || '' }),
            h('td', { text: src.changed ? 'yes' + (src.note ? ': ' + src.note : '') : 'no' }),
          ]);
        })),
      ])));
    }
    root.appendChild(h('details', { class: 'checked-call' }, [
      h('summary', { text: 'The call checked' }),
      h('pre', { class: 'call', text: JSON.stringify({ tool: data.tool, arguments: data.arguments }, null, 2) }),
    ]));
    root.appendChild(provenanceBlock(env));
  }

  // Draws a tool result (a CallToolResult) into `root`. opts.callTool(name, args) → Promise of
  // a CallToolResult, for paging and opening datasets from the view.
  function render(root, tool, args, result, opts) {
    opts = opts || {};
    root.textContent = '';
    root.classList.add('tally-view');
    root.dataset.tool = tool;
    delete root.dataset.kind;
    var env = result && result.structuredContent;
    if (!result || result.isError || !env || !env.data) {
      var text = ((result && result.content) || []).filter(function (c) { return c.type === 'text'; }).map(function (c) { return c.text; }).join('\n');
      var message = text;
      try {
        var parsed = JSON.parse(text);
        var e = parsed.error || parsed;
        message = [e.message, e.hint, e.example && 'Example: ' + JSON.stringify(e.example)].filter(Boolean).join('\n') || text;
      } catch (err) { /* plain text */ }
      root.appendChild(h('div', { class: 'error', role: 'alert', text: message || 'the tool returned no result' }));
      return;
    }
    if (tool === 'summarize_records') renderSummary(root, env, opts);
    else if (tool === 'query_records') renderQuery(root, env, args || {}, opts);
    else if (tool === 'inspect_dataset') renderInspect(root, env, opts);
    else if (tool === 'list_datasets') renderList(root, env, args || {}, opts);
    else if (tool === 'cite_provisions') renderCite(root, env, args || {}, opts);
    else if (tool === 'verify_answer') renderVerify(root, env);
    else root.appendChild(h('pre', { class: 'call', text: JSON.stringify(env, null, 2) }));
  }

  window.TallyView = {
    render: render,
    chooseChart: chooseChart,
    pickGroups: pickGroups,
    askChart: askChart,
    pickPairs: pickPairs,
    metricInfo: metricInfo,
    h: h,
    fmtNumber: fmtNumber,
    topValues: topValues,
  };
})();
