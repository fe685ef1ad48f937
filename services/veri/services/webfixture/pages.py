"""The URL-extraction demo's pages and tasks, generated deterministically from an index.

Page i is a pure function of i and `SEED`: a small company home page (title, nav, a few paragraphs,
footer) with 6-9 links, each with its own label and its own absolute URL on the company's `.test`
domain (reserved: those URLs never resolve and never need to). Task i asks for the URL of one of
those links, named either by its label ("the link labelled "Pricing"") or by what it is for ("the
link to Brightleaf's pricing page"). Its label and its kind are unique on the page and its URL
appears there exactly once, as `href="<url>"` (no character in it needs HTML escaping).

Rows store the full page URL (`url`, also written into the prompt: the agent fetches what the user
asked about, like any unmodified agent). The page URLs are built on a base URL: by default the
compose service `http://webfixture:8080` that sandboxes reach on the `rollouts` network; set
$VERI_WEBFIXTURE_URL (or `veri data url-extract --base-url`) to build a dataset for pages served
elsewhere, e.g. http://127.0.0.1:8080 for unsandboxed runs.

Uses `random.Random` seeded with a string (hashed with SHA-512: stable across platforms and Python
versions); tests check the committed dataset against a fresh generation.
"""

from __future__ import annotations

import html
import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass

from veri.core import envs

SEED = "veri-webfixture-v1"
NUM_PAGES = 256  # pages 0..NUM_PAGES-1 exist; one task per page
DEFAULT_BASE_URL = "http://webfixture:8080"  # the compose service, as sandboxes see it


def base_url() -> str:
    """The webfixture base URL datasets are built on: $VERI_WEBFIXTURE_URL or the compose service."""
    return (os.environ.get(envs.VERI_WEBFIXTURE_URL) or DEFAULT_BASE_URL).rstrip("/")


def page_path(index: int) -> str:
    return f"/pages/{index}.html"


def page_url(index: int, base: str | None = None) -> str:
    return (base or base_url()).rstrip("/") + page_path(index)


# --- the world the pages describe ------------------------------------------------------------

@dataclass(frozen=True)
class Site:
    brand: str  # "Brightleaf"
    company: str  # "Brightleaf Coffee Roasters"
    domain: str  # "brightleaf-coffee.test"
    product: str  # "Atlas"
    items: tuple[str, ...]  # what they sell
    city: str
    other_city: str
    founded: int
    year: int

    @property
    def brand_slug(self) -> str:
        return self.brand.lower()

    @property
    def product_slug(self) -> str:
        return self.product.lower()


BRAND_HEADS = ["Bright", "North", "Blue", "Silver", "Red", "Open", "Quiet", "Swift", "Cedar", "Harbor",
               "Maple", "Copper", "Lumen", "Pixel", "Tidal", "Granite", "Sage", "Orbit", "Juniper", "Falcon"]
BRAND_TAILS = ["leaf", "wind", "stone", "field", "mill", "lane", "forge", "path", "wave", "nest", "brook", "peak"]
INDUSTRIES = [  # (company suffix, domain word, things they sell)
    ("Coffee Roasters", "coffee", ("single-origin beans", "espresso blends", "cold brew kits")),
    ("Analytics", "analytics", ("dashboards", "event pipelines", "usage reports")),
    ("Bikes", "bikes", ("city bikes", "cargo bikes", "e-bike conversion kits")),
    ("Cloud", "cloud", ("managed databases", "object storage", "edge functions")),
    ("Books", "books", ("first editions", "audiobooks", "reading clubs")),
    ("Garden Supply", "garden", ("heirloom seeds", "raised beds", "compost systems")),
    ("Robotics", "robotics", ("warehouse robots", "robot arms", "fleet software")),
    ("Tea Company", "tea", ("loose-leaf teas", "tea sets", "tasting boxes")),
    ("Maps", "maps", ("offline maps", "routing APIs", "trail guides")),
    ("Audio", "audio", ("studio headphones", "podcast microphones", "audio interfaces")),
    ("Outdoor Gear", "outdoor", ("tents", "trail shoes", "rain shells")),
    ("Bakery", "bakery", ("sourdough loaves", "pastry boxes", "baking classes")),
    ("Payments", "pay", ("card terminals", "invoicing tools", "payout APIs")),
    ("Learning", "learn", ("online courses", "study plans", "live tutoring")),
    ("Travel", "travel", ("city guides", "rail passes", "boutique stays")),
    ("Furniture", "furniture", ("oak tables", "modular sofas", "desk lamps")),
]
PRODUCTS = ["Atlas", "Beacon", "Compass", "Drift", "Ember", "Flux", "Grove", "Halo", "Juno", "Kite",
            "Loom", "Mosaic", "Nimbus", "Onyx", "Prism", "Quill", "Relay", "Sprout", "Tandem", "Vista"]
CITIES = ["Lisbon", "Portland", "Leeds", "Tallinn", "Oslo", "Porto", "Ghent", "Utrecht", "Bristol",
          "Montreal", "Wellington", "Kyoto", "Lyon", "Valencia", "Boulder", "Halifax"]


@dataclass(frozen=True)
class LinkKind:
    name: str
    description: str  # what the link is for, after "<brand>'s": "pricing page"
    labels: tuple[str, ...]  # what its anchor text may be
    url: Callable[[random.Random, Site], str]


def _pick(rng: random.Random, *options: str) -> str:
    return rng.choice(options)


LINK_KINDS: tuple[LinkKind, ...] = (
    LinkKind("docs", "product documentation", ("Documentation", "Docs", "Read the docs", "User guide"),
             lambda r, s: f"https://docs.{s.domain}/{s.product_slug}/v{r.randint(1, 5)}/"
                          + _pick(r, "getting-started", "overview", "quickstart", "introduction")),
    LinkKind("pricing", "pricing page", ("Pricing", "Plans and pricing", "See plans"),
             lambda r, s: f"https://{s.domain}/pricing?plan=" + _pick(r, "starter", "team", "business", "annual")),
    LinkKind("careers", "careers page", ("Careers", "Jobs", "We're hiring", "Join the team"),
             lambda r, s: f"https://jobs.{s.domain}/openings/"
                          + _pick(r, "engineering", "all", "remote", "operations")),
    LinkKind("blog", "blog", ("Blog", "Journal", "From the blog"),
             lambda r, s: f"https://blog.{s.domain}/{s.year}/"
                          + _pick(r, "behind-the-scenes", "spring-update", "how-we-test", "meet-the-team")),
    LinkKind("support", "help center", ("Help center", "Support", "Get help"),
             lambda r, s: f"https://help.{s.domain}/hc/" + _pick(r, "en-us", "en-gb", "en")),
    LinkKind("status", "service status page", ("Status", "System status", "Service health"),
             lambda r, s: f"https://status.{s.domain}/" + _pick(r, "overview", "history", "uptime")),
    LinkKind("changelog", "release notes", ("Changelog", "Release notes", "What's new"),
             lambda r, s: f"https://{s.domain}/changelog/{s.product_slug}-{r.randint(1, 9)}-{r.randint(0, 20)}"),
    LinkKind("api", "API reference", ("API reference", "Developer API", "For developers"),
             lambda r, s: f"https://developer.{s.domain}/api/v{r.randint(1, 4)}/reference"),
    LinkKind("contact", "contact form", ("Contact", "Contact us", "Get in touch"),
             lambda r, s: f"https://{s.domain}/contact?topic=" + _pick(r, "sales", "general", "partnerships")),
    LinkKind("privacy", "privacy policy", ("Privacy", "Privacy policy", "Your data"),
             lambda r, s: f"https://{s.domain}/legal/privacy-" + _pick(r, "policy", "notice")),
    LinkKind("terms", "terms of service", ("Terms", "Terms of service", "Terms and conditions"),
             lambda r, s: f"https://{s.domain}/legal/terms-of-" + _pick(r, "service", "use")),
    LinkKind("press", "press kit", ("Press", "Press kit", "Media resources"),
             lambda r, s: f"https://{s.domain}/press/{s.brand_slug}-press-kit-{s.year}.zip"),
    LinkKind("community", "community forum", ("Community", "Forum", "Discussions"),
             lambda r, s: f"https://community.{s.domain}/c/"
                          + _pick(r, "general", "show-and-tell", "questions", "ideas")),
    LinkKind("source", "source code repository", ("Source code", "View the source", "Code on our forge"),
             lambda r, s: f"https://code.{s.domain}/{s.brand_slug}/{s.product_slug}"),
    LinkKind("download", "download page", ("Download", "Get the app", "Install"),
             lambda r, s: f"https://downloads.{s.domain}/{s.product_slug}/{r.randint(1, 6)}.{r.randint(0, 12)}/"
                          + _pick(r, "macos", "windows", "linux", "android")),
    LinkKind("newsletter", "newsletter sign-up page", ("Newsletter", "Subscribe", "Get updates by email"),
             lambda r, s: f"https://news.{s.domain}/subscribe?list="
                          + _pick(r, "weekly", "monthly", "product-updates")),
    LinkKind("events", "events calendar", ("Events", "Webinars", "Meetups"),
             lambda r, s: f"https://events.{s.domain}/{s.year}/" + _pick(r, "calendar", "webinars", "meetups")),
    LinkKind("security", "security disclosure policy", ("Security", "Report a vulnerability", "Responsible disclosure"),
             lambda r, s: f"https://{s.domain}/security/" + _pick(r, "disclosure", "report", "vulnerability-policy")),
    LinkKind("partners", "partner program", ("Partners", "Partner program", "Become a partner"),
             lambda r, s: f"https://partners.{s.domain}/" + _pick(r, "apply", "program", "join")),
    LinkKind("shop", "online shop", ("Shop", "Store", "Buy online"),
             lambda r, s: f"https://shop.{s.domain}/collections/" + _pick(r, "new", "bestsellers", "all", "sale")),
)
KINDS = {kind.name: kind for kind in LINK_KINDS}


@dataclass(frozen=True)
class Link:
    kind: str
    label: str
    url: str


@dataclass(frozen=True)
class PageSpec:
    """Everything page `index` shows; `target` is the link its task asks for."""

    index: int
    site: Site
    links: tuple[Link, ...]  # in page order: nav, body, footer
    nav_count: int
    body_count: int
    target: Link
    by_label: bool  # the task names the target by its label (else by what it is for)
    sentences: tuple[str, ...]
    link_sentences: tuple[str, ...]  # one per body link, each with a "{link}" slot
    headings: tuple[str, ...]
    prompt_template: str


# --- generation ------------------------------------------------------------------------------

SENTENCES = [
    "{company} has been making {item0} in {city} since {founded}.",
    "Our small team ships {item1} to customers in more than {countries} countries.",
    "{product} is our newest line of {item2}, built for people who care about the details.",
    "This season we are expanding our range of {item1} and opening a second workshop in {other_city}.",
    "Every order is checked by hand before it leaves the {city} workshop.",
    "We write down everything we learn along the way, from supplier notes to repair guides.",
    "Customers tell us {product} saves them about {hours} hours a week.",
    "We think good {item0} should be simple, durable and fairly priced.",
    "Last year we switched to recycled packaging for all {item2}.",
    "Most of our {item1} are designed, tested and repaired in {city}.",
]
LINK_SENTENCES = [
    "For the details, see {link}.",
    "New here? Start with {link}.",
    "{link} is updated every week.",
    "Looking for something else? Try {link}.",
    "Also worth a look: {link}.",
]
HEADINGS = ["Why {brand}", "What's new in {product}", "Our story", "Made in {city}", "How it works"]
LABEL_PROMPTS = [
    'What URL does the link labelled "{label}" on {url} point to?',
    'Open {url} and find the link labelled "{label}". What is its URL?',
    'Find the "{label}" link on {url} and give me the address it points to.',
]
DESCRIPTION_PROMPTS = [
    "Open {url} and find the link to {brand}'s {description}. What is its URL?",
    "The page {url} links to {brand}'s {description}. What URL does that link point to?",
    "What is the URL of {brand}'s {description}? It is linked from {url}.",
]


def _site(rng: random.Random) -> Site:
    brand = rng.choice(BRAND_HEADS) + rng.choice(BRAND_TAILS)
    suffix, domain_word, items = rng.choice(INDUSTRIES)
    city, other_city = rng.sample(CITIES, 2)
    founded = rng.randint(1985, 2019)
    return Site(brand=brand, company=f"{brand} {suffix}", domain=f"{brand.lower()}-{domain_word}.test",
                product=rng.choice(PRODUCTS), items=items, city=city, other_city=other_city,
                founded=founded, year=rng.randint(2023, 2025))


def _links(rng: random.Random, site: Site) -> tuple[Link, ...]:
    """6-9 links of distinct kinds; no label contains another (so "labelled X" names one link)."""
    kinds = rng.sample(LINK_KINDS, rng.randint(6, 9))
    links: list[Link] = []
    for kind in kinds:
        taken = [link.label.lower() for link in links]
        labels = [label for label in kind.labels
                  if not any(label.lower() in other or other in label.lower() for other in taken)]
        if labels:
            links.append(Link(kind.name, rng.choice(labels), kind.url(rng, site)))
    return tuple(links)


def page_spec(index: int) -> PageSpec:
    if index < 0:
        raise ValueError(f"page index must be >= 0, got {index}")
    rng = random.Random(f"{SEED}:{index}")
    site = _site(rng)
    links = _links(rng, site)
    nav_count = rng.randint(3, min(4, len(links) - 3))  # 2 links in the text, at least 1 in the footer
    by_label = rng.random() < 0.5
    return PageSpec(
        index=index, site=site, links=links, nav_count=nav_count, body_count=2, target=rng.choice(links),
        by_label=by_label, sentences=tuple(rng.sample(SENTENCES, 6)),
        link_sentences=tuple(rng.sample(LINK_SENTENCES, 2)), headings=tuple(rng.sample(HEADINGS, 2)),
        prompt_template=rng.choice(LABEL_PROMPTS if by_label else DESCRIPTION_PROMPTS),
    )


def _fill(text: str, site: Site) -> str:
    return text.format(company=site.company, brand=site.brand, product=site.product, city=site.city,
                       other_city=site.other_city, founded=site.founded, item0=site.items[0],
                       item1=site.items[1], item2=site.items[2], countries=12 + site.founded % 30,
                       hours=2 + site.founded % 7)


def _text(text: str) -> str:
    return html.escape(text, quote=False)


def _a(link: Link) -> str:
    return f'<a href="{html.escape(link.url)}">{_text(link.label)}</a>'


def render(spec: PageSpec) -> str:
    site = spec.site
    esc = _text
    nav = spec.links[: spec.nav_count]
    body = spec.links[spec.nav_count: spec.nav_count + spec.body_count]
    footer = spec.links[spec.nav_count + spec.body_count:]
    s = [esc(_fill(sentence, site)) for sentence in spec.sentences]
    inline = []
    for template, link in zip(spec.link_sentences, body, strict=True):
        before, _, after = template.partition("{link}")
        inline.append(esc(before) + _a(link) + esc(after))
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{esc(site.company)} | {esc(site.items[0].capitalize())} and more</title>",
        "</head>",
        "<body>",
        "<header>",
        f'<nav><a href="/">{esc(site.brand)}</a> ' + " ".join(_a(link) for link in nav) + "</nav>",
        "</header>",
        "<main>",
        f"<h1>{esc(site.company)}</h1>",
        f"<p>{s[0]} {s[1]} {inline[0]}</p>",
        f"<h2>{esc(_fill(spec.headings[0], site))}</h2>",
        f"<p>{s[2]} {s[3]}</p>",
        f"<h2>{esc(_fill(spec.headings[1], site))}</h2>",
        f"<p>{s[4]} {inline[1]} {s[5]}</p>",
        "</main>",
        "<footer>",
        "<ul>",
        *(f"<li>{_a(link)}</li>" for link in footer),
        "</ul>",
        f"<p>&copy; {site.year} {esc(site.company)}. All rights reserved.</p>",
        "</footer>",
        "</body>",
        "</html>",
    ]
    return "\n".join(lines) + "\n"


def page(index: int) -> str:
    """The HTML of page `index` (a pure function of the index and `SEED`)."""
    return render(page_spec(index))


def task(index: int, base: str | None = None) -> dict[str, object]:
    """Dataset row `index`: the prompt, the page it is about, and the expected answer."""
    spec = page_spec(index)
    url = page_url(index, base)
    target = spec.target
    prompt = spec.prompt_template.format(url=url, label=target.label, brand=spec.site.brand,
                                         description=KINDS[target.kind].description)
    return {"prompt": prompt, "url": url, "expected_url": target.url, "label": target.label,
            "kind": target.kind, "page": index}


def tasks(count: int = NUM_PAGES, base: str | None = None) -> list[dict[str, object]]:
    return [task(index, base) for index in range(count)]


def dataset_text(count: int = NUM_PAGES, base: str | None = None) -> str:
    """The dataset as JSONL text (`veri data url-extract`)."""
    return "".join(json.dumps(row) + "\n" for row in tasks(count, base))
