vcl 4.1;
# Simplefeed behind Varnish (7.x): a shared cache in front of the uWSGI service.
#
# Fill the placeholders (envsubst, as for deploy/nginx/), e.g.
#   export SIMPLEFEED_BACKEND_HOST=127.0.0.1 SIMPLEFEED_BACKEND_PORT=8080
#   envsubst '${SIMPLEFEED_BACKEND_HOST} ${SIMPLEFEED_BACKEND_PORT}' \
#       < deploy/varnish.vcl > /etc/varnish/simplefeed.vcl
# The backend is `simplefeed serve`'s HTTP socket (or nginx with deploy/nginx/ in front of it).
#
# Start varnishd with `-p http_gzip_support=off` (deploy/README.md): the origin negotiates br,
# gzip and identity itself, each with its own strong ETag and `Vary: Accept-Encoding`; with
# Varnish's gzip support on, it would ask the origin for gzip only, gunzip that for clients
# without gzip (weakening its ETag: W/"...-gzip", no 304 for the page's identity ETag) and never
# hand br to a client asking for br.
#
# What it does (and tests/test_varnish.py checks, with many polling clients):
# - archived pages (max-age one year, immutable) are fetched from the origin once, then served
#   from the cache; nothing ever needs purging, since they never change;
# - /recent and the working page are cached for their max-age (SIMPLEFEED_RECENT_MAX_AGE),
#   fetched by one request at a time however many clients ask (Varnish's waiting list), and
#   then revalidated with If-None-Match / If-Modified-Since: a 304 from the origin when nothing
#   changed (beresp.keep below), the new document when something did, so a publish shows up
#   within max-age;
# - publishing (POST) passes straight through, with its Authorization header;
# - every client gets the origin's representation for its Accept-Encoding as the origin sent it
#   (coding, bytes, strong ETag, 304s), one cached copy per coding (br, gzip, identity).

import std;

backend simplefeed {
    .host = "${SIMPLEFEED_BACKEND_HOST}";
    .port = "${SIMPLEFEED_BACKEND_PORT}";
    .connect_timeout = 2s;
    .first_byte_timeout = 30s;
    .between_bytes_timeout = 10s;
    # The probe asks what the caches' clients ask: a read. Not /healthz, which is 503 also when
    # only publishing cannot proceed (low disk, unwritable archive, base URL mismatch) while
    # every read still works: a sick backend here would turn uncached archived pages into 503s
    # and serve /recent stale. /recent is one indexed query (no Accept-Encoding: identity), 200
    # whenever reads work, 503 when the database does not answer.
    .probe = {
        .url = "/recent";
        .interval = 5s;
        .timeout = 2s;
        .window = 5;
        .threshold = 3;
        .initial = 3;   # healthy from the start, not after the first probes
    }
}

sub vcl_recv {
    set req.backend_hint = simplefeed;
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);  # publishing: never cached, credentials passed on
    }
    if (req.http.Prefer) {
        # A long-poll (Prefer: wait=N): the origin holds it until the feed changes; a cached
        # copy would end it at once, and its answer is for this client only.
        return (pass);
    }
    # Reading is public and no answer depends on who asks, on cookies or on the query string:
    # one cache entry per path. (Varnish's built-in VCL would not cache a request carrying
    # Authorization or Cookie at all.)
    unset req.http.Authorization;
    unset req.http.Cookie;
    set req.url = regsub(req.url, "\?.*$", "");
    # Accept-Encoding as the origin would read it (br first, then gzip, then identity), so the
    # cache keeps at most three copies per URL (the origin's Vary: Accept-Encoding) and the
    # origin still chooses. Headers with weights (";q=") are left as sent: the origin weighs
    # them (rare; each such spelling is a copy of its own). Needs http_gzip_support=off, or
    # Varnish would replace the header with "gzip" towards the origin.
    if (req.http.Accept-Encoding && req.http.Accept-Encoding !~ ";") {
        if (req.http.Accept-Encoding ~ "(?i)(^|,)\s*(br|\*)\s*(,|$)") {
            set req.http.Accept-Encoding = "br";
        } elsif (req.http.Accept-Encoding ~ "(?i)(^|,)\s*(x-)?gzip\s*(,|$)") {
            set req.http.Accept-Encoding = "gzip";
        } else {
            unset req.http.Accept-Encoding;  # identity: the origin's answer to no header
        }
    }
    # While the origin is healthy never serve a live document past its max-age; when it is not,
    # serve what we have (beresp.grace below) rather than an error.
    if (std.healthy(req.backend_hint)) {
        set req.grace = 0s;
    }
    return (hash);
}

sub vcl_backend_response {
    # TTL comes from the origin's Cache-Control (max-age); errors are not cached (the origin
    # sends them with no-store). Keep expired objects for a day so that the next fetch is
    # conditional (If-None-Match with the stored ETag, If-Modified-Since with Last-Modified),
    # and as a fallback while the origin is down.
    set beresp.grace = 1h;
    set beresp.keep = 1d;
    return (deliver);
}

sub vcl_deliver {
    # For operators (and the tests): whether this answer came from the cache.
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}
