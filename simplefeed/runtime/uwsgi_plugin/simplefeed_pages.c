/*
 * simplefeed_pages: a uWSGI plugin whose routing action serves archived pages from their files.
 *
 *     plugin = /path/to/simplefeed_pages_plugin.so
 *     route-run = archived-page:/absolute/path/to/archive
 *
 * It answers a GET or HEAD of a page URL as canonically written, and hands every other
 * request to the next rule, which passes it to the app. uWSGI's own static file serving sends
 * the file: sendfile, Last-Modified, a 304 to If-Modified-Since, Range, and the .gz or .br copy
 * that the request accepts (static-gzip-all). The fixed headers come from uwsgi.ini's
 * add-header lines. This action checks in one pass what the ini's routing rules would check
 * one rule at a time, because uWSGI copies each rule's text for each request.
 */
#include <uwsgi.h>

extern struct uwsgi_server uwsgi;

/* uWSGI's static file serving, which uwsgi.h does not declare. */
int uwsgi_real_file_serve(struct wsgi_request *, char *, size_t, struct stat *);

/* Whether s[0..len) is made only of the characters of a feed name after its first. */
static int feed_name_tail(const char *s, size_t len) {
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return 0;
	}
	return 1;
}

/* Whether s[0..len) is a page number: digits, the first not 0. */
static int page_number(const char *s, size_t len) {
	if (len == 0 || len > 19 || s[0] < '1' || s[0] > '9') return 0;
	for (size_t i = 1; i < len; i++) {
		if (s[i] < '0' || s[i] > '9') return 0;
	}
	return 1;
}

/*
 * Whether the request target is a page URL as canonically written:
 * (/feeds/NAME)?/pages/N, NAME as the app takes it ([a-z0-9][a-z0-9_-]{0,63}), no query string.
 */
static int canonical_page(const char *uri, size_t len) {
	if (len > 7 && !memcmp(uri, "/feeds/", 7)) {
		const char *name = uri + 7;
		const char *slash = memchr(name, '/', len - 7);
		if (!slash) return 0;
		size_t name_len = slash - name;
		if (name_len < 1 || name_len > 64) return 0;
		if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9'))) return 0;
		if (!feed_name_tail(name + 1, name_len - 1)) return 0;
		len -= slash - uri;
		uri = slash;
	}
	return len > 7 && !memcmp(uri, "/pages/", 7) && page_number(uri + 7, len - 7);
}

/* Whether s[0..len) holds needle, in any case. */
static int holds(const char *s, size_t len, const char *needle) {
	size_t n = strlen(needle);
	for (size_t i = 0; i + n <= len; i++) {
		if (!strncasecmp(s + i, needle, n)) return 1;
	}
	return 0;
}

/* Write n as two digits at dst. */
static char *two_digits(char *dst, int n) {
	dst[0] = '0' + n / 10;
	dst[1] = '0' + n % 10;
	return dst + 2;
}

/*
 * Write "Date: <now>" as RFC 9110 writes an HTTP date, and return its length (35).
 * By hand, because snprintf costs 3,000 instructions a page here (bench/route_cost.py), and
 * with gmtime_r, because uWSGI's own formatter uses gmtime, which 200 threads would share.
 */
static int date_header(char dst[36]) {
	static const char week[] = "SunMonTueWedThuFriSat";
	static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
	time_t now = uwsgi_now();
	struct tm tm;
	gmtime_r(&now, &tm);
	char *p = dst;
	memcpy(p, "Date: ", 6);
	memcpy(p + 6, week + 3 * tm.tm_wday, 3);
	memcpy(p + 9, ", ", 2);
	p = two_digits(p + 11, tm.tm_mday);
	*p++ = ' ';
	memcpy(p, months + 3 * tm.tm_mon, 3);
	p += 3;
	*p++ = ' ';
	int year = tm.tm_year + 1900;
	p = two_digits(two_digits(p, year / 100), year % 100);
	*p++ = ' ';
	p = two_digits(p, tm.tm_hour);
	*p++ = ':';
	p = two_digits(p, tm.tm_min);
	*p++ = ':';
	p = two_digits(p, tm.tm_sec);
	memcpy(p, " GMT", 4);
	return p + 4 - dst;
}

static int archived_page(struct wsgi_request *wsgi_req, struct uwsgi_route *ur) {
	/* uWSGI starts its answer with the request's protocol as sent, so only HTTP/1.1 passes. */
	if (uwsgi_strncmp(wsgi_req->protocol, wsgi_req->protocol_len, "HTTP/1.1", 8)) return UWSGI_ROUTE_NEXT;
	if (uwsgi_strncmp(wsgi_req->method, wsgi_req->method_len, "GET", 3)
	    && uwsgi_strncmp(wsgi_req->method, wsgi_req->method_len, "HEAD", 4)) return UWSGI_ROUTE_NEXT;
	if (!canonical_page(wsgi_req->uri, wsgi_req->uri_len)) return UWSGI_ROUTE_NEXT;
	/* The app closes a connection whose client asks, because http11-socket keeps each open. */
	uint16_t connection_len = 0;
	char *connection = uwsgi_get_var(wsgi_req, "HTTP_CONNECTION", 15, &connection_len);
	if (connection && holds(connection, connection_len, "close")) return UWSGI_ROUTE_NEXT;
	/* uWSGI finds a coding by substring and ignores weights, so "gzip;q=0" would get gzip. */
	if (holds(wsgi_req->encoding, wsgi_req->encoding_len, "q=")) return UWSGI_ROUTE_NEXT;

	/* Room for the path, and the ".gz" or ".br" that uWSGI appends to look for a copy. */
	char path[PATH_MAX + 1];
	if (ur->data_len + wsgi_req->uri_len + 4 > PATH_MAX) return UWSGI_ROUTE_NEXT;
	memcpy(path, ur->data, ur->data_len);
	memcpy(path + ur->data_len, wsgi_req->uri, wsgi_req->uri_len);
	size_t path_len = ur->data_len + wsgi_req->uri_len;
	path[path_len] = 0;
	struct stat st;
	/* No file yet: the app answers, and writes it back if it is missing. */
	if (stat(path, &st) || !S_ISREG(st.st_mode)) return UWSGI_ROUTE_NEXT;

	/* uWSGI sends no Date of its own, and RFC 9110 wants one from a server with a clock. */
	char date[36];
	uwsgi_additional_header_add(wsgi_req, date, date_header(date));
	uwsgi_real_file_serve(wsgi_req, path, path_len, &st);
	return UWSGI_ROUTE_BREAK;
}

static int archived_page_rule(struct uwsgi_route *ur, char *args) {
	size_t len = strlen(args);
	while (len > 1 && args[len - 1] == '/') len--;
	if (args[0] != '/') {
		uwsgi_log("archived-page: the archive directory must be an absolute path, not %s\n", args);
		exit(1);
	}
	ur->func = archived_page;
	ur->data = args;
	ur->data_len = len;
	return 0;
}

static void register_action(void) {
	uwsgi_register_router("archived-page", archived_page_rule);
}

struct uwsgi_plugin simplefeed_pages_plugin = {
	.name = "simplefeed_pages",
	.on_load = register_action,
};
