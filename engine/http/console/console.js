// The sagaflow operator console: a page that calls the engine's own HTTP API (/v1) with the
// operator's bearer token, exactly as curl would; it has no access of its own. Every value from the
// database reaches the page as text (textContent, never HTML); the diagram is an SVG image.
'use strict';

(() => {
  const TOKEN_KEY = 'sagaflow.token';
  const POLL_MS = 3000;
  const STATUSES = ['running', 'compensating', 'failed', 'completed', 'compensated'];
  const STATUS_LABELS = {
    running: 'running', compensating: 'compensating', failed: 'parked (failed)',
    completed: 'completed', compensated: 'compensated',
  };
  const TERMINAL = new Set(['completed', 'compensated']);

  let token = sessionStorage.getItem(TOKEN_KEY) || '';
  let generation = 0;       // a view's answers are dropped once another view replaced it
  let pollTimer = null;
  let diagramUrl = null;    // the blob: URL of the diagram shown
  let confirmResolve = null;

  const $ = (id) => document.getElementById(id);

  // Builds an element; strings become text nodes, never markup.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === 'class') node.className = value;
      else if (name === 'text') node.textContent = value;
      else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? '' : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function statusBadge(status, id) {
    return el('span', { class: 'status ' + status, id, 'data-status': status }, STATUS_LABELS[status] || status);
  }

  function time(text) {
    return text ? text.replace('T', ' ').replace('Z', ' UTC') : '';
  }

  function age(seconds) {
    if (seconds === null || seconds === undefined) return '—';
    const s = Math.round(seconds);
    if (s < 120) return s + ' s';
    if (s < 7200) return Math.round(s / 60) + ' min';
    if (s < 172800) return (s / 3600).toFixed(1) + ' h';
    return (s / 86400).toFixed(1) + ' days';
  }

  function json(value) {
    return el('pre', { class: 'json' }, value === null || value === undefined ? '—' : JSON.stringify(value, null, 2));
  }

  function banner(text, info) {
    const b = $('banner');
    b.hidden = !text;
    b.className = 'banner' + (info ? ' info' : '');
    b.textContent = text || '';
  }

  function where(text) {
    $('where').textContent = text;
    document.title = text + ' · sagaflow console';
  }

  function refreshed() {
    $('refreshed').textContent = 'refreshed ' + new Date().toLocaleTimeString();
  }

  function showToken() {
    $('token-button').textContent = token ? 'Token ✓' : 'Token';
  }

  // The API with the tab's token. Answers {status, ok, data}; a network failure is status 0.
  async function api(method, path, body) {
    const headers = { Accept: 'application/json' };
    if (token) headers.Authorization = 'Bearer ' + token;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let response;
    try {
      response = await fetch(path, {
        method, headers, credentials: 'omit', cache: 'no-store',
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (e) {
      return { status: 0, ok: false, data: { title: 'No answer', detail: 'the engine did not answer (' + e.message + ')' } };
    }
    const type = response.headers.get('Content-Type') || '';
    let data = null;
    if (type.includes('json')) data = await response.json();
    else if (type.startsWith('image/')) data = await response.blob();
    else data = await response.text();
    if (response.status === 401) {
      banner('The engine wants a token: enter an operator\'s token (Token, top right).');
      openTokenDialog();
    } else if (response.status === 403) {
      banner(problem({ status: 403, data }) + ' — use an operator\'s token.');
    }
    return { status: response.status, ok: response.ok, data };
  }

  function problem(answer) {
    const d = answer.data;
    if (d && typeof d === 'object' && d.detail) return (d.title ? d.title + ': ' : '') + d.detail;
    return 'HTTP ' + answer.status;
  }

  function stopPolling() {
    if (pollTimer) clearTimeout(pollTimer);
    pollTimer = null;
  }

  function poll(g, fn) {
    stopPolling();
    pollTimer = setTimeout(async () => {
      if (g !== generation) return;
      await fn();
      if (g === generation) poll(g, fn);
    }, POLL_MS);
  }

  // ---- Sagas: overview, filters, one page -------------------------------------------------

  function listHash(filters) {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(filters)) if (v) p.set(k, v);
    const q = p.toString();
    return '#/sagas' + (q ? '?' + q : '');
  }

  function showList(params) {
    const g = generation;
    const filters = {};
    for (const k of ['status', 'type', 'key', 'idPrefix', 'olderMin', 'newerMin']) filters[k] = params.get(k) || '';
    where('Sagas');
    const pages = [''];  // cursors of the pages walked to, for Previous

    const typeSelect = el('select', { id: 'filter-type', name: 'type' }, el('option', { value: '' }, 'any'));
    if (filters.type) typeSelect.append(el('option', { value: filters.type, selected: true }, filters.type));
    const statusSelect = el('select', { id: 'filter-status', name: 'status' }, el('option', { value: '' }, 'any'),
      STATUSES.map((s) => el('option', { value: s, selected: s === filters.status }, STATUS_LABELS[s])));
    const input = (id, name, value, attrs) => el('input', Object.assign({ id, name, value }, attrs || {}));
    const form = el('form', { class: 'filters', id: 'filters' },
      el('label', {}, 'Type', typeSelect),
      el('label', {}, 'Status', statusSelect),
      el('label', {}, 'Older than (min)', input('filter-older', 'olderMin', filters.olderMin, { class: 'short', inputmode: 'numeric' })),
      el('label', {}, 'Newer than (min)', input('filter-newer', 'newerMin', filters.newerMin, { class: 'short', inputmode: 'numeric' })),
      el('label', {}, 'Idempotency key', input('filter-key', 'key', filters.key, { spellcheck: 'false' })),
      el('label', {}, 'Saga id prefix', input('filter-prefix', 'idPrefix', filters.idPrefix, { spellcheck: 'false', class: 'mono' })),
      el('button', { type: 'submit', class: 'primary', id: 'filter-apply' }, 'Apply'),
      el('button', { type: 'button', id: 'filter-clear', onclick: () => { location.hash = '#/sagas'; } }, 'Clear'));
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      const next = {};
      for (const k of Object.keys(filters)) next[k] = (form.elements[k].value || '').trim();
      location.hash = listHash(next);
    });

    const counts = el('div', { class: 'counts', id: 'counts' });
    const facts = el('dl', { class: 'facts', id: 'facts' });
    const tbody = el('tbody');
    const table = el('table', { id: 'sagas' },
      el('thead', {}, el('tr', {}, ['Saga id', 'Type', 'Status', 'Idempotency key', 'Created', 'Updated'].map((h) => el('th', {}, h)))),
      tbody);
    const pageInfo = el('span', { class: 'muted', id: 'page-info' });
    const previous = el('button', { type: 'button', id: 'page-previous', disabled: true }, '← Newer');
    const next = el('button', { type: 'button', id: 'page-next', disabled: true }, 'Older →');
    let nextCursor = null;
    previous.addEventListener('click', () => { pages.pop(); loadPage(); });
    next.addEventListener('click', () => { if (nextCursor) { pages.push(nextCursor); loadPage(); } });

    $('main').replaceChildren(
      el('section', { class: 'panel', id: 'overview' }, el('h2', {}, 'Overview'), counts, facts),
      el('section', { class: 'panel' }, el('h2', {}, 'Sagas, newest first'), form),
      el('section', { class: 'panel' }, table, el('div', { class: 'pager' }, previous, next, pageInfo)));

    async function loadOverview() {
      const answer = await api('GET', '/v1/overview');
      if (g !== generation || !answer.ok) return;
      const o = answer.data;
      const estimated = new Set(o.countsEstimated || []);
      counts.replaceChildren(...STATUSES.map((s) => el('button', {
        type: 'button', class: 'count' + (s === filters.status ? ' selected' : ''), 'data-status': s,
        title: estimated.has(s) ? 'estimated from the planner\'s statistics' : 'exact',
        onclick: () => { location.hash = listHash(Object.assign({}, filters, { status: s === filters.status ? '' : s })); },
      }, el('span', { class: 'n' }, (estimated.has(s) ? '≈ ' : '') + (o.counts[s] || 0).toLocaleString()),
      el('span', { class: 'label' }, STATUS_LABELS[s]))));
      const rate = (v) => (v === null || v === undefined ? 'measuring…' : v.toFixed(1));
      const oldest = o.oldestOpen
        ? el('a', { href: '#/saga/' + o.oldestOpen.sagaId, class: 'mono' }, age(o.oldestOpen.ageSeconds) + ' · ' + o.oldestOpen.sagaId.slice(0, 13) + '…')
        : 'none open';
      const fact = (label, value, id) => el('div', {}, el('dt', {}, label), el('dd', { id }, value));
      facts.replaceChildren(
        fact('Started per minute (this engine)', rate(o.thisEngine.startedPerMinute), 'fact-started'),
        fact('Finished per minute (this engine)', rate(o.thisEngine.finishedPerMinute), 'fact-finished'),
        fact('Oldest open saga', oldest, 'fact-oldest'),
        fact('Oldest unpublished outbox row', o.outbox.backlog ? age(o.outbox.oldestUnpublishedSeconds) : 'none', 'fact-outbox'),
        fact('Outbox backlog', String(o.outbox.backlog), 'fact-backlog'),
        fact('Parked sagas', String(o.parked), 'fact-parked'));
      for (const t of o.types) {
        if (![...typeSelect.options].some((opt) => opt.value === t)) typeSelect.append(el('option', { value: t }, t));
      }
    }

    async function loadPage() {
      const p = new URLSearchParams();
      if (filters.status) p.set('status', filters.status);
      if (filters.type) p.set('type', filters.type);
      if (filters.key) p.set('key', filters.key);
      if (filters.idPrefix) p.set('idPrefix', filters.idPrefix);
      const minutes = (v) => String(Math.round(Number(v) * 60));
      if (filters.olderMin) p.set('minAge', minutes(filters.olderMin));
      if (filters.newerMin) p.set('maxAge', minutes(filters.newerMin));
      p.set('limit', '50');
      const cursor = pages[pages.length - 1];
      if (cursor) p.set('cursor', cursor);
      const answer = await api('GET', '/v1/sagas?' + p.toString());
      if (g !== generation) return;
      if (!answer.ok) {
        tbody.replaceChildren(el('tr', {}, el('td', { colspan: 6, class: 'empty', id: 'list-error' }, problem(answer))));
        return;
      }
      banner('');
      const items = answer.data.items;
      tbody.replaceChildren(...items.map((s) => el('tr', { 'data-saga-id': s.sagaId, 'data-status': s.status },
        el('td', {}, el('a', { href: '#/saga/' + s.sagaId, class: 'mono' }, s.sagaId)),
        el('td', {}, s.type),
        el('td', {}, statusBadge(s.status)),
        el('td', { class: 'wrap mono' }, s.idempotencyKey || '—'),
        el('td', {}, time(s.createdAt)),
        el('td', {}, time(s.updatedAt)))));
      if (!items.length) tbody.append(el('tr', {}, el('td', { colspan: 6, class: 'empty', id: 'no-match' }, 'No saga matches.')));
      nextCursor = answer.data.nextCursor;
      next.disabled = !nextCursor;
      previous.disabled = pages.length <= 1;
      pageInfo.textContent = 'page ' + pages.length + ' · ' + items.length + ' sagas';
      refreshed();
    }

    const refresh = async () => { await Promise.all([loadOverview(), loadPage()]); };
    refresh().then(() => poll(g, refresh));
  }

  // ---- One saga ----------------------------------------------------------------------------

  function showSaga(id) {
    const g = generation;
    where('Saga ' + id);
    let shownUpdate = null;
    let lastStatus = null;
    const head = el('div', { class: 'saga-head' });
    const result = el('div', { class: 'result', id: 'action-result', hidden: true });
    const diagram = el('div', { class: 'diagram', id: 'diagram' });
    const facts = el('dl', { class: 'facts', id: 'saga-facts' });
    const input = el('div', { id: 'saga-input' });
    const data = el('div', { id: 'saga-data' });
    const steps = el('tbody');
    const timeline = el('tbody');
    $('main').replaceChildren(
      el('section', { class: 'panel' }, head, result, el('h3', {}, 'Facts'), facts),
      el('section', { class: 'panel' }, el('h2', {}, 'Diagram'), diagram),
      el('div', { class: 'columns' },
        el('section', { class: 'panel' }, el('h2', {}, 'Input'), input),
        el('section', { class: 'panel' }, el('h2', {}, 'Data'), data)),
      el('section', { class: 'panel' }, el('h2', {}, 'Step phases'),
        el('table', { id: 'steps' }, el('thead', {}, el('tr', {}, ['Step', 'Phase', 'Status', 'Attempt', 'Dispatched', 'Answered', 'Next attempt / deadline', 'Reply'].map((h) => el('th', {}, h)))), steps)),
      el('section', { class: 'panel' }, el('h2', {}, 'Timeline'),
        el('table', { id: 'timeline' }, el('thead', {}, el('tr', {}, ['At', 'Kind', 'Step', 'Phase', 'Attempt', 'Detail'].map((h) => el('th', {}, h)))), timeline)));

    async function act(kind, saga) {
      const retry = kind === 'retry';
      const text = retry
        ? 'Saga ' + saga.sagaId + ' is parked' + (saga.parkedReason ? ' (' + saga.parkedReason + ')' : '') +
          '. The step phase that gave up gets one more attempt now, with the same command event id, so its ' +
          'participant still deduplicates it. The saga goes back to running (or compensating).'
        : 'Saga ' + saga.sagaId + ' will be called off: the step in flight, if any, and every completed step are ' +
          'compensated, newest first, and the saga ends compensated. This cannot be undone. The engine refuses ' +
          'once the saga has reached its pivot or a retriable step.';
      const answer = await confirmAction(retry ? 'Retry this parked saga?' : 'Cancel this saga?', text,
        retry ? 'Retry now' : 'Cancel the saga', !retry);
      if (!answer.confirmed || g !== generation) return;
      const r = retry
        ? await api('POST', '/v1/sagas/' + saga.sagaId + '/retry')
        : await api('POST', '/v1/sagas/' + saga.sagaId + '/cancel', answer.reason ? { reason: answer.reason } : {});
      if (g !== generation) return;
      result.hidden = false;
      result.className = 'result' + (r.ok ? '' : ' refused');
      result.setAttribute('data-outcome', r.ok ? 'accepted' : 'refused');
      result.textContent = r.ok
        ? (retry ? 'Retry accepted: ' : 'Cancel accepted: ') + (r.data.detail || r.data.status || '') + ' — the timeline below shows it.'
        : 'Refused: ' + problem(r);
      await load();
    }

    async function loadDiagram(saga) {
      const answer = await api('GET', '/v1/sagas/' + saga.sagaId + '/graph?format=svg');
      if (g !== generation || !answer.ok) return;
      if (diagramUrl) URL.revokeObjectURL(diagramUrl);
      diagramUrl = URL.createObjectURL(answer.data);
      diagram.replaceChildren(el('img', { src: diagramUrl, alt: 'the saga drawn over its definition, each step phase coloured by its status', id: 'diagram-image' }));
    }

    async function load() {
      const answer = await api('GET', '/v1/sagas/' + id);
      if (g !== generation) return;
      if (!answer.ok) {
        head.replaceChildren(el('h1', {}, 'Saga ' + id), el('span', { id: 'saga-error' }, problem(answer)));
        return;
      }
      banner('');
      const s = answer.data;
      const actions = el('div', { class: 'actions' });
      if (s.status === 'failed') {
        actions.append(el('button', { type: 'button', class: 'primary', id: 'retry-button', onclick: () => act('retry', s) }, 'Retry…'));
      }
      if (s.status === 'running') {
        actions.append(el('button', { type: 'button', class: 'danger', id: 'cancel-button', onclick: () => act('cancel', s) }, 'Cancel…'));
      }
      head.replaceChildren(el('h1', { class: 'mono', id: 'saga-id' }, s.sagaId), el('span', {}, s.type + ' v' + s.definitionVersion),
        statusBadge(s.status, 'saga-status'), actions);
      const traceId = s.traceparent ? s.traceparent.split('-')[1] : '';
      const fact = (label, value, fid) => el('div', {}, el('dt', {}, label), el('dd', { id: fid }, value || '—'));
      facts.replaceChildren(
        fact('Created', time(s.createdAt)), fact('Updated', time(s.updatedAt)),
        fact('Idempotency key', s.idempotencyKey, 'saga-key'),
        fact('Parked because', s.parkedReason, 'saga-parked-reason'),
        fact('Deadline', time(s.deadlineAt)),
        fact('Trace id', traceId ? el('span', { class: 'mono', title: s.traceparent }, traceId) : '', 'saga-trace'));
      input.replaceChildren(json(s.input));
      data.replaceChildren(json(s.data));
      steps.replaceChildren(...s.steps.map((p) => el('tr', { 'data-step': p.step, 'data-phase': p.phase, 'data-status': p.status },
        el('td', {}, p.step), el('td', {}, p.phase), el('td', {}, statusBadge(p.status)), el('td', {}, String(p.attempt)),
        el('td', {}, time(p.dispatchedAt)), el('td', {}, time(p.completedAt)),
        el('td', {}, p.nextAttemptAt ? 'retry ' + time(p.nextAttemptAt) : (p.deadlineAt ? 'deadline ' + time(p.deadlineAt) : '')),
        el('td', { class: 'wrap' }, p.reply === null ? '—' : json(p.reply)))));
      timeline.replaceChildren(...s.timeline.map((e) => el('tr', { 'data-kind': e.kind },
        el('td', {}, time(e.at)), el('td', {}, e.kind), el('td', {}, e.step), el('td', {}, e.phase),
        el('td', {}, e.attempt ? String(e.attempt) : ''),
        el('td', { class: 'wrap' }, e.detail === null || (typeof e.detail === 'object' && !Object.keys(e.detail).length) ? '' : json(e.detail)))));
      if (s.updatedAt !== shownUpdate || s.status !== lastStatus) {
        shownUpdate = s.updatedAt;
        lastStatus = s.status;
        await loadDiagram(s);
      }
      refreshed();
      if (TERMINAL.has(s.status)) stopPolling();
    }

    load().then(() => { if (!TERMINAL.has(lastStatus)) poll(g, load); });
  }

  // ---- Dialogs -----------------------------------------------------------------------------

  function confirmAction(title, text, okLabel, withReason) {
    $('confirm-title').textContent = title;
    $('confirm-text').textContent = text;
    $('confirm-ok').textContent = okLabel;
    $('confirm-reason-label').hidden = !withReason;
    $('confirm-reason').value = '';
    $('confirm-dialog').returnValue = '';
    $('confirm-dialog').showModal();
    return new Promise((resolve) => { confirmResolve = resolve; });
  }

  function openTokenDialog() {
    if ($('token-dialog').open) return;
    $('token-input').value = token;
    $('token-dialog').showModal();
  }

  function route() {
    stopPolling();
    generation += 1;
    const hash = location.hash || '#/';
    const saga = hash.match(/^#\/saga\/([0-9a-fA-F-]{36})$/);
    if (saga) {
      showSaga(saga[1]);
      return;
    }
    const q = hash.indexOf('?');
    showList(new URLSearchParams(q >= 0 ? hash.slice(q + 1) : ''));
  }

  $('confirm-cancel').addEventListener('click', () => $('confirm-dialog').close('cancel'));
  $('confirm-ok').value = 'ok';
  $('confirm-dialog').addEventListener('close', () => {
    const resolve = confirmResolve;
    confirmResolve = null;
    if (resolve) resolve({ confirmed: $('confirm-dialog').returnValue === 'ok', reason: $('confirm-reason').value.trim() });
  });
  $('token-button').addEventListener('click', openTokenDialog);
  $('token-cancel').addEventListener('click', () => $('token-dialog').close('cancel'));
  $('token-save').value = 'save';
  $('token-dialog').addEventListener('close', () => {
    if ($('token-dialog').returnValue !== 'save') return;
    token = $('token-input').value.trim();
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
    showToken();
    banner('');
    route();
  });
  window.addEventListener('hashchange', route);
  showToken();
  route();
})();
