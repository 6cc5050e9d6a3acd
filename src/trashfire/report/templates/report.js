// The long tables of report.html (macros.html.j2's table past inline_rows rows): their rows are
// JSON in the page, shown a page at a time, searched and sorted here: no library, no network.
(function () {
  "use strict";
  const PAGE = 50;
  // a leading number (3, -0.25, 1.2e+03, 45%, "12 [10, 14]"), not a hash that starts with digits
  const NUMBER = /^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?%?(\s|$)/i;

  function numeric(text) {
    return NUMBER.test(text) ? parseFloat(text) : null;
  }

  // numbers in order, then text in order, empty cells last
  function compare(a, b) {
    if (!a || !b) return (a ? 0 : 1) - (b ? 0 : 1);
    const x = numeric(a), y = numeric(b);
    if (x !== null && y !== null) return x - y;
    if (x !== null || y !== null) return x === null ? 1 : -1;
    return a.localeCompare(b);
  }

  function element(tag, attributes, text) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function build(box) {
    const data = JSON.parse(box.querySelector("script").textContent);
    const rows = data.rows;
    const haystack = rows.map((row) => row.join("\u0001").toLowerCase());
    let order = rows.map((_, i) => i), shown = order, page = 0, sorted = -1, ascending = true;

    const search = element("input", { type: "search", placeholder: "search: every word must appear in the row", size: "40" });
    const previous = element("button", { type: "button" }, "‹ previous");
    const next = element("button", { type: "button" }, "next ›");
    const info = element("span", { class: "size" });
    const controls = element("div", { class: "controls" });
    controls.append(search, " ", previous, " ", next, " ", info);
    const table = element("table");
    const head = table.createTHead().insertRow();
    const body = table.createTBody();
    data.columns.forEach((name, c) => {
      const th = element("th", { title: "click to sort" }, name);
      th.addEventListener("click", () => sortBy(c));
      head.appendChild(th);
    });
    const wide = element("div", { class: "wide" });
    wide.appendChild(table);
    box.append(controls, wide);

    function render() {
      const pages = Math.max(1, Math.ceil(shown.length / PAGE));
      page = Math.min(page, pages - 1);
      body.replaceChildren();
      for (const i of shown.slice(page * PAGE, (page + 1) * PAGE)) {
        const tr = body.insertRow();
        rows[i].forEach((text, c) => {
          const td = tr.insertCell();
          td.textContent = text;
          if (data.text[c]) td.className = "t";
        });
      }
      const first = shown.length ? page * PAGE + 1 : 0, last = Math.min((page + 1) * PAGE, shown.length);
      const of = shown.length < rows.length ? `${shown.length} matching (of the ${rows.length} here)` : `${rows.length}`;
      info.textContent = `rows ${first}–${last} of ${of}; click a column to sort`;
      previous.disabled = page === 0;
      next.disabled = page >= pages - 1;
    }

    function filter() {
      const words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
      shown = order.filter((i) => words.every((word) => haystack[i].includes(word)));
      page = 0;
      render();
    }

    function sortBy(c) {
      ascending = c === sorted ? !ascending : true;
      sorted = c;
      const sign = ascending ? 1 : -1;
      order = order.slice().sort((a, b) => sign * compare(rows[a][c], rows[b][c]) || a - b);
      Array.from(head.cells).forEach((th, k) => th.classList.toggle("sorted", k === c));
      head.cells[c].dataset.direction = ascending ? "▲" : "▼";
      filter();
    }

    search.addEventListener("input", filter);
    previous.addEventListener("click", () => { page -= 1; render(); });
    next.addEventListener("click", () => { page += 1; render(); });
    render();
  }

  document.querySelectorAll("div.datatable").forEach(build);
})();
