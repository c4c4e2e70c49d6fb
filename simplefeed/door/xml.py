"""The door's checks on inline XML and XHTML content.

Feed readers pass XHTML content on as HTML. They read XML content by its namespaces. So inline
content must read the same to them as it does to an XML parser. And it must carry nothing that
a feed reader takes for feed structure or runs as script.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

from lxml import etree

from simplefeed.door import markup, uris
from simplefeed.door.namespaces import FEED_NAMESPACES, USERLAND_RSS
from simplefeed.model import (
    DISCOURAGED_CHAR,
    FH_NS,
    MAX_ATTRIBUTES,
    MAX_CONTENT_NAMESPACES,
    SF_NS,
    XHTML_NS,
    XML_NS,
)

__all__ = ["check_inline_xml", "html_reading"]

_XHTML_DIV = f'<div xmlns="{XHTML_NS}">'

#: What declares a namespace in a tag of XML text. Text that mentions one is not counted.
_NAMESPACE_DECLARATION = re.compile(r"xmlns(?::[^\s=>/]+)?\s*=")


_TAG = re.compile(r"<[^<>]*>")


#: The door's parser keeps processing instructions, so that they can be refused. The documents
#: would not carry them, and content comes back as it was sent or is refused.
_CHECK_PARSER = etree.XMLParser(
    resolve_entities=False, no_network=True, load_dtd=False, dtd_validation=False, huge_tree=False
)


def check_inline_xml(text: str, *, xhtml: bool) -> str | None:
    """Why ``text`` cannot be inline XML content, or None if it can.

    It is parsed as feedgen will parse it, with entity expansion, DTD loading and network
    access off. A DOCTYPE is refused, because its entities could not be carried into the feed.
    Content under an XML media type must have a namespace. Some namespaces feedparser reads as
    feed structure (:mod:`simplefeed.door.namespaces`). The content may hold no element,
    attribute, prefix or declaration of those. XHTML is one of them, because it belongs in
    ``xhtml`` content.
    """
    declarations = sum(len(_NAMESPACE_DECLARATION.findall(tag)) for tag in _TAG.findall(text))
    if declarations > MAX_CONTENT_NAMESPACES:
        # Count them before parsing. Checking them costs their number times the elements'.
        return (
            f"{declarations} namespace declarations: at most {MAX_CONTENT_NAMESPACES} (feed"
            " readers take time growing with their square)"
        )
    source = f"{_XHTML_DIV}{text}</div>" if xhtml else text
    try:
        root = etree.fromstring(source, _CHECK_PARSER)
    except (etree.XMLSyntaxError, ValueError) as exc:
        return str(exc)
    problem = _outside_problem(root, xhtml)
    if problem:
        return problem
    for el in root.iter(etree.Element):
        problem = _element_problem(el, xhtml)
        if problem:
            return problem
    if xhtml:
        problem = markup.written_tree_problem(*html_reading(root))
        if problem:
            return f"feed readers pass XHTML on as HTML, which reads it otherwise: {problem}"
    return None


def _outside_problem(root: Any, xhtml: bool) -> str | None:
    """Say why the document around the elements cannot be carried, or None.

    A DOCTYPE, a comment or a PI there cannot be carried.
    """
    doctype: str = root.getroottree().docinfo.doctype
    if doctype:
        return "DOCTYPE declarations are not allowed"
    for comment in root.iter(etree.Comment):
        problem = _comment_problem(str(comment.text), xhtml)
        if problem:
            return problem
    for node in (*root.itersiblings(preceding=True), *root.itersiblings(), *root.iter(etree.PI)):
        # The rendered document would not hold them, because only the root element goes into
        # it and feedgen's parser drops processing instructions. So they are refused.
        what = (
            "a processing instruction"
            if isinstance(node, etree._ProcessingInstruction)
            else "a comment outside the root element"
        )
        return f"{what} ({str(node)[:40]!r}) is not allowed: the feed would not carry it"
    return None


def _element_problem(el: Any, xhtml: bool) -> str | None:
    """Say why one element of inline content cannot be carried, or None."""
    for value in (el.text, el.tail, *el.attrib.values()):
        if value:
            problem = _value_problem(el, value, xhtml)
            if problem:
                return problem
    if len(el.attrib) > MAX_ATTRIBUTES:
        return (
            f"<{etree.QName(el).localname}> has {len(el.attrib)} attributes: at most"
            f" {MAX_ATTRIBUTES} (feedparser's time grows with their square; the Simplefeed"
            " consumer refuses such a page)"
        )
    return (
        _namespace_problem(el, xhtml)
        or _feed_vocabulary_attribute(el)
        or _feed_vocabulary_declaration(el, xhtml)
        or (_xhtml_policy_problem(el) if xhtml else _xml_script_problem(el))
    )


def _value_problem(el: Any, value: str, xhtml: bool) -> str | None:
    """Say why a text or attribute value of ``el`` cannot be carried, or None."""
    qname = _QNAME_VALUE.match(value)
    if qname is not None and qname[1] in el.nsmap and not xhtml:
        # The document renames every prefix (c0, c1, ...). So a value that names one would
        # name nothing there, as in xsi:type="xs:string".
        return (
            f"<{etree.QName(el).localname}> holds {value.strip()[:40]!r}, a name with the"
            f" prefix {qname[1]!r}: the feed renames prefixes, so it would name nothing;"
            " send such XML as Base64 (application/octet-stream) or without the prefix"
        )
    bad = DISCOURAGED_CHAR.search(value)
    if bad is not None:
        # A character reference passes the check on the text as sent, so it is checked here.
        return (
            f"<{etree.QName(el).localname}> holds U+{ord(bad.group()):04X}, which XML"
            " discourages and feed validators flag (a control character or the"
            " replacement character; as a character reference too)"
        )
    return None


def _namespace_problem(el: Any, xhtml: bool) -> str | None:
    """Say why the namespace of ``el`` cannot be carried, or None."""
    namespace = etree.QName(el).namespace
    if xhtml:
        if namespace != XHTML_NS:
            return f"<{el.tag}> is not an XHTML element"
        if el.prefix is not None:
            # The W3C validator warns "Avoid Namespace Prefix". The page is kept for good.
            return (
                f"<{el.prefix}:{etree.QName(el).localname}> names XHTML with a prefix: write"
                f" <{etree.QName(el).localname}> (xhtml content is the content of a div"
                " that makes XHTML the default namespace)"
            )
        return None
    if namespace is None:
        return (
            f"<{el.tag}> has no namespace; inline XML content must declare one "
            "(inside an Atom document it would otherwise read as Atom)"
        )
    if namespace == XHTML_NS:
        return (
            f"<{etree.QName(el).localname}> is XHTML; send XHTML as content_type xhtml "
            "(the content of a div), not under an XML media type"
        )
    if _feed_vocabulary(namespace):
        return (
            f"<{etree.QName(el).localname}> is in {namespace}, a namespace feed readers "
            "(feedparser) read as feed structure; inline XML content must not use it"
        )
    return None


def _comment_problem(text: str, xhtml: bool) -> str | None:
    """Say why a comment holding ``text`` may not be in inline content, or None.

    HTML reads ``<!-->`` and ``<!--->`` as a whole comment, and what follows as markup. A
    reader that puts the content in its page runs an ``<img onerror>`` after one. XHTML holds
    no comments, as HTML content holds none, because feedparser drops them.
    """
    if xhtml:
        return (
            f"a comment (<!--{text[:40]}-->) is not allowed: xhtml content holds none, as html"
            " content holds none (feed readers drop them)"
        )
    if text.startswith((">", "->")):
        return (
            f"a comment beginning <!--{text[:2]} is not allowed: HTML's parser ends it there and"
            " reads what follows as markup"
        )
    return None


def html_reading(div: Any) -> tuple[list[markup.Token], str]:
    """Return the content of the XHTML ``div`` as HTML, as tokens and as text.

    This is how a generic reader passes XHTML content on. feedparser gives it as a string, and
    a page puts it in its HTML. The tokens are start tags with their attributes, text, and end
    tags. Only attributes in no namespace count. Each element has an end tag, but an empty void
    one. Comments are refused before this. The walk is iterative, so it never recurses, however
    deep the tree is.
    """
    tokens: list[markup.Token] = []
    out: list[str] = []

    def text(value: str | None) -> None:
        if value:
            tokens.append(("text", value, ()))
            out.append(escape(value, quote=False))

    text(div.text)
    stack: list[tuple[Any, Any]] = [(div, iter(div))]
    while stack:
        parent, children = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            if parent is not div:
                tag = etree.QName(parent).localname
                if len(parent) or parent.text or tag not in markup.VOID_ELEMENTS:
                    tokens.append(("end", tag, ()))
                    out.append(f"</{tag}>")
                text(parent.tail)
            continue
        tag = etree.QName(child).localname
        attributes = tuple((k, v) for k, v in child.attrib.items() if k[0] != "{")
        tokens.append(("start", tag, attributes))
        written = "".join(f' {name}="{escape(value)}"' for name, value in attributes)
        out.append(f"<{tag}{written}>")
        text(child.text)
        stack.append((child, iter(child)))
    return tokens, "".join(out)


def _xhtml_policy_problem(el: Any) -> str | None:
    """Check that XHTML content holds only what the HTML policy allows.

    The policy is in :mod:`simplefeed.door.markup`. The tree must read in HTML as it is written,
    because feed readers pass XHTML content on as HTML.
    """
    tag = etree.QName(el).localname
    problem = markup.element_problem(tag)
    if problem:
        return problem
    above = el.getparent()
    parent = etree.QName(above).localname if above is not None else "div"  # The content's div.
    if markup.ends_at(parent, tag):
        return (
            f"a <{tag}> in a <{parent}>: HTML ends the <{parent}> at it, and feed readers pass"
            f" XHTML on as HTML (close the <{parent}> first)"
        )
    for name, value in el.attrib.items():
        qname = etree.QName(name)
        if qname.namespace == XML_NS and qname.localname == "lang":
            continue
        if qname.namespace is not None:
            return f"the attribute {qname.localname!r} of <{tag}> is in {qname.namespace}"
        problem = markup.attribute_problem(tag, qname.localname, value)
        if problem:
            return problem
    return None


#: XML vocabularies that browsers render inline, resolving their URL attributes. XLink's
#: attributes are refused, because feedparser reads them as feed structure.
_RENDERED_NAMESPACES = frozenset(
    {"http://www.w3.org/2000/svg", "http://www.w3.org/1998/Math/MathML"}
)


def _xml_script_problem(el: Any) -> str | None:
    attributes = [(etree.QName(name).localname, value) for name, value in el.attrib.items()]
    rendered = etree.QName(el).namespace in _RENDERED_NAMESPACES
    return markup.xml_script_problem(etree.QName(el).localname, attributes, rendered=rendered)


#: Feed-vocabulary namespaces, in lower case, as feedparser compares them. They have no
#: trailing '/', because a reader may match either spelling. The set adds the two namespaces
#: that this service's documents are read by. Some readers search the whole document. To them
#: an ``<fh:archive/>`` in content would mark a live document archived. A ``<sf:seq>`` would
#: give an entry another sequence number.
_FEED_NAMESPACES = frozenset(
    uri.lower().rstrip("/") for uri in (*FEED_NAMESPACES, FH_NS, SF_NS) if uri
)


#: Prefixes feedparser gives feed vocabularies. To it, ``<dc:title>`` is Dublin Core's title.
_FEED_PREFIXES = frozenset(p.lower() for p in FEED_NAMESPACES.values() if p) - {"xml"}


#: The attributes in a feed-vocabulary namespace that inline content may carry. They are
#: xml:lang and xml:space. An xml:base is refused, because it would re-base URLs. XLink is in
#: feedparser's table too. So SVG links are written ``href``, as SVG 2 has them.
_ALLOWED_NAMESPACED_ATTRIBUTES = {XML_NS: frozenset({"lang", "space"})}


def _feed_vocabulary(namespace: str) -> bool:
    lower = namespace.lower()
    return lower.rstrip("/") in _FEED_NAMESPACES or USERLAND_RSS in lower


def _feed_vocabulary_attribute(el: Any) -> str | None:
    for name in el.attrib:
        qname = etree.QName(name)
        namespace = qname.namespace
        if namespace is None or not _feed_vocabulary(namespace):
            continue
        if qname.localname in _ALLOWED_NAMESPACED_ATTRIBUTES.get(namespace, ()):
            continue
        return (
            f"the attribute {qname.localname!r} of <{etree.QName(el).localname}> is in "
            f"{namespace}, a namespace feed readers read as feed structure"
        )
    return None


def _feed_vocabulary_declaration(el: Any, xhtml: bool) -> str | None:
    parent = el.getparent()
    inherited = parent.nsmap if parent is not None else {}
    for prefix, namespace in el.nsmap.items():
        if inherited.get(prefix) == namespace:
            continue
        if _feed_vocabulary(namespace):
            if xhtml and namespace == XHTML_NS:
                continue
            return (
                f"it declares {namespace}, a namespace feed readers read as feed structure; "
                "inline XML content must not use it"
            )
        if prefix is not None and prefix.lower() in _FEED_PREFIXES:
            return (
                f"the prefix {prefix!r} is the one feed readers (feedparser) give a feed "
                "vocabulary; choose another prefix"
            )
        scheme = markup.SCHEME.match(namespace)
        if scheme is None:
            return f"the namespace name {namespace!r} is not an absolute URI"
        if scheme[1].lower() not in markup.EVENT_URL_SCHEMES:
            # Feed validators flag "URI scheme not IANA registered", as for javascript: or foo:.
            return (
                f"the namespace name {namespace[:80]!r} has the scheme {scheme[1]!r}: name a"
                f" namespace with one of {', '.join(sorted(markup.EVENT_URL_SCHEMES))}"
            )
        problem = uris.iri_problem(namespace)
        if problem:
            return f"the namespace name {namespace!r} {problem}"
    return None


#: A value that is a qualified name (``xs:string``). Its prefix is looked up among those declared.
_QNAME_VALUE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.\-]*):[A-Za-z_][A-Za-z0-9_.\-]*\s*\Z")
