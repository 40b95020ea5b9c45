// The page's DOM helpers: h() builds elements, patch() brings a live subtree to what a fresh
// render drew, keeping the elements that stay (matched by data-key, else by tag in order), so
// text being typed, the caret and focus survive an event that re-renders the panel or a lane.
// Every text from the server goes in through text nodes, never parsed as markup.

const HANDLERS = Symbol("handlers");

function listen(el, type, fn) {
  if (!el[HANDLERS]) el[HANDLERS] = {};
  if (!(type in el[HANDLERS])) el.addEventListener(type, (event) => el[HANDLERS][type]?.(event));
  el[HANDLERS][type] = fn;
}

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "key") el.dataset.key = value;
    else if (key.startsWith("on")) listen(el, key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function keyOf(node) {
  return node.nodeType === Node.ELEMENT_NODE ? node.dataset.key ?? null : null;
}

function same(a, b) {
  return a.nodeType === b.nodeType && a.nodeName === b.nodeName && keyOf(a) === keyOf(b);
}

// What a person types lives in properties the attributes do not carry: left alone.
const OWN_VALUE = new Set(["INPUT", "TEXTAREA", "SELECT"]);

function patchAttributes(el, next) {
  for (const { name } of [...el.attributes]) {
    if (!next.hasAttribute(name)) el.removeAttribute(name);
  }
  for (const { name, value } of [...next.attributes]) {
    if (el.getAttribute(name) !== value) el.setAttribute(name, value);
  }
  const handlers = next[HANDLERS];
  if (handlers) for (const [type, fn] of Object.entries(handlers)) listen(el, type, fn);
  if (el[HANDLERS]) {
    for (const type of Object.keys(el[HANDLERS])) {
      if (!handlers || !(type in handlers)) el[HANDLERS][type] = undefined;
    }
  }
}

function patchNode(el, next) {
  if (el.nodeType === Node.TEXT_NODE) {
    if (el.nodeValue !== next.nodeValue) el.nodeValue = next.nodeValue;
    return el;
  }
  patchAttributes(el, next);
  if (OWN_VALUE.has(el.nodeName) && el.nodeName !== "SELECT") return el;
  patchChildren(el, [...next.childNodes]);
  return el;
}

// Makes parent's children what `wanted` lists, reusing the children that match.
export function patchChildren(parent, wanted) {
  const old = [...parent.childNodes];
  const keyed = new Map();
  for (const node of old) {
    const key = keyOf(node);
    if (key !== null) keyed.set(key, node);
  }
  const used = new Set();
  let cursor = 0;
  const result = wanted.map((next) => {
    const key = keyOf(next);
    let match = null;
    if (key !== null) {
      match = keyed.get(key) ?? null;
    } else {
      for (let i = cursor; i < old.length; i++) {
        if (!used.has(old[i]) && keyOf(old[i]) === null && same(old[i], next)) {
          match = old[i];
          cursor = i + 1;
          break;
        }
      }
    }
    if (match && same(match, next) && !used.has(match)) {
      used.add(match);
      return patchNode(match, next);
    }
    return next;
  });
  for (const node of old) if (!used.has(node)) node.remove();
  result.forEach((node, i) => {
    if (parent.childNodes[i] !== node) parent.insertBefore(node, parent.childNodes[i] ?? null);
  });
}

export function patch(parent, ...children) {
  const wanted = children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false)
    .map((c) => (c instanceof Node ? c : document.createTextNode(String(c))));
  patchChildren(parent, wanted);
}
