/* tools/tlhttp/date.c: HTTP-date parsing and formatting in proleptic Gregorian UTC, without libc's time zone machinery. */
#include <errno.h>
#include <string.h>

#include "tlhttp/date.h"

static const char day_names[7][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
static const char *const day_long[7] = { "Sunday",   "Monday", "Tuesday", "Wednesday",
					 "Thursday", "Friday", "Saturday" };
static const char month_names[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
					 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
/* Days before each month in a common year. */
static const int month_start[13] = { 0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334, 365 };

/* Days from 0001-01-01 to 1970-01-01. */
#define EPOCH_DAYS INT64_C(719162)

static int leap(int64_t y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* Days from 0001-01-01 to y-01-01, y >= 1. */
static int64_t days_before_year(int64_t y)
{
	int64_t p = y - 1;
	return p * 365 + p / 4 - p / 100 + p / 400;
}

static int month_days(int64_t y, int m)
{
	return month_start[m + 1] - month_start[m] + (m == 1 && leap(y));
}

int tlhttp_date_format(int64_t t, char *out)
{
	int64_t z, y, sod;
	int m, d, yd, wd;

	if (!out || t < TLHTTP_TIME_MIN || t > TLHTTP_TIME_MAX)
		return -EINVAL;
	/* Floor division: times before 1970 are negative. */
	z = t / 86400;
	sod = t % 86400;
	if (sod < 0) {
		sod += 86400;
		z--;
	}
	wd = (int)(((z % 7) + 7 + 4) % 7); /* 1970-01-01 was a Thursday */
	z += EPOCH_DAYS;
	/* 146097 days in 400 years: a guess at most one year off. */
	y = z * 400 / 146097 + 1;
	while (days_before_year(y) > z)
		y--;
	while (days_before_year(y + 1) <= z)
		y++;
	yd = (int)(z - days_before_year(y));
	int ly = leap(y);
	for (m = 0; m < 11 && yd >= month_start[m + 1] + (m >= 1 && ly); m++)
		;
	d = yd - month_start[m] - (m >= 2 && ly) + 1;

	memcpy(out, day_names[wd], 3);
	out[3] = ',';
	out[4] = ' ';
	out[5] = (char)('0' + d / 10);
	out[6] = (char)('0' + d % 10);
	out[7] = ' ';
	memcpy(out + 8, month_names[m], 3);
	out[11] = ' ';
	out[12] = (char)('0' + y / 1000);
	out[13] = (char)('0' + y / 100 % 10);
	out[14] = (char)('0' + y / 10 % 10);
	out[15] = (char)('0' + y % 10);
	out[16] = ' ';
	int h = (int)(sod / 3600), mi = (int)(sod / 60 % 60), s = (int)(sod % 60);
	out[17] = (char)('0' + h / 10);
	out[18] = (char)('0' + h % 10);
	out[19] = ':';
	out[20] = (char)('0' + mi / 10);
	out[21] = (char)('0' + mi % 10);
	out[22] = ':';
	out[23] = (char)('0' + s / 10);
	out[24] = (char)('0' + s % 10);
	memcpy(out + 25, " GMT", 4);
	return TLHTTP_DATE_LEN;
}

static int digit(char c)
{
	return c >= '0' && c <= '9';
}

/* Two digits at p, or -1. */
static int d2(const char *p)
{
	return digit(p[0]) && digit(p[1]) ? (p[0] - '0') * 10 + (p[1] - '0') : -1;
}

static int month_of(const char *p)
{
	for (int m = 0; m < 12; m++)
		if (!memcmp(p, month_names[m], 3))
			return m;
	return -1;
}

static int short_day(const char *p)
{
	for (int d = 0; d < 7; d++)
		if (!memcmp(p, day_names[d], 3))
			return 1;
	return 0;
}

/* "HH:MM:SS" at p: seconds of the day (60 as a leap second), or -1. */
static int64_t time_of(const char *p)
{
	int h = d2(p), m = d2(p + 3), s = d2(p + 6);

	if (p[2] != ':' || p[5] != ':' || h < 0 || h > 23 || m < 0 || m > 59 || s < 0 || s > 60)
		return -1;
	return h * 3600 + m * 60 + s;
}

static int assemble(int64_t y, int m, int d, int64_t sod, int64_t *out)
{
	if (y < 1 || y > 9999 || m < 0 || d < 1 || d > month_days(y, m) || sod < 0)
		return -EINVAL;
	int64_t days = days_before_year(y) + month_start[m] + (m >= 2 && leap(y)) + d - 1 - EPOCH_DAYS;
	int64_t t = days * 86400 + sod;
	if (t > TLHTTP_TIME_MAX) /* 9999-12-31 23:59:60 */
		return -EINVAL;
	*out = t;
	return 0;
}

static int year_of(int64_t t)
{
	char buf[TLHTTP_DATE_LEN];

	if (t < TLHTTP_TIME_MIN)
		return 1;
	if (t > TLHTTP_TIME_MAX)
		return 9999;
	tlhttp_date_format(t, buf);
	return (buf[12] - '0') * 1000 + (buf[13] - '0') * 100 + (buf[14] - '0') * 10 + (buf[15] - '0');
}

int tlhttp_date_parse(const char *s, size_t n, int64_t now, int64_t *out)
{
	if (!s || !out)
		return -EINVAL;
	if (n == TLHTTP_DATE_LEN && s[3] == ',') {
		/* IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" */
		int d = d2(s + 5), m = month_of(s + 8), y1 = d2(s + 12), y2 = d2(s + 14);
		if (!short_day(s) || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' ||
		    y1 < 0 || y2 < 0 || memcmp(s + 25, " GMT", 4))
			return -EINVAL;
		return assemble(y1 * 100 + y2, m, d, time_of(s + 17), out);
	}
	if (n == 24 && s[3] == ' ') {
		/* asctime: "Sun Nov  6 08:49:37 1994" */
		int m = month_of(s + 4), d, y1 = d2(s + 20), y2 = d2(s + 22);
		if (!short_day(s) || s[7] != ' ' || s[10] != ' ' || s[19] != ' ' || y1 < 0 || y2 < 0)
			return -EINVAL;
		d = s[8] == ' ' ? (digit(s[9]) ? s[9] - '0' : -1) : d2(s + 8);
		return assemble(y1 * 100 + y2, m, d, time_of(s + 11), out);
	}
	/* rfc850-date: "Sunday, 06-Nov-94 08:49:37 GMT" */
	for (int wd = 0; wd < 7; wd++) {
		size_t l = strlen(day_long[wd]);
		if (n != l + 24 || memcmp(s, day_long[wd], l))
			continue;
		const char *p = s + l;
		int d = d2(p + 2), m = month_of(p + 5), yy = d2(p + 9);
		if (p[0] != ',' || p[1] != ' ' || p[4] != '-' || p[8] != '-' || p[11] != ' ' || yy < 0 ||
		    memcmp(p + 20, " GMT", 4))
			return -EINVAL;
		int ny = year_of(now);
		int64_t y = ny - ny % 100 + yy;
		if (y > ny + 50)
			y -= 100;
		else if (y <= ny - 50)
			y += 100;
		return assemble(y, m, d, time_of(p + 12), out);
	}
	return -EINVAL;
}

int tlhttp_date_cache_init(struct tlhttp_date_cache *c)
{
	if (!c)
		return -EINVAL;
	c->sec = INT64_MIN;
	memcpy(c->line, "Date: ", 6);
	memset(c->line + 6, 0, sizeof c->line - 6);
	return 0;
}

int tlhttp_date_cache_update(struct tlhttp_date_cache *c, int64_t now)
{
	if (!c || now < TLHTTP_TIME_MIN || now > TLHTTP_TIME_MAX)
		return -EINVAL;
	if (now == c->sec)
		return 0;
	tlhttp_date_format(now, c->line + 6);
	memcpy(c->line + 6 + TLHTTP_DATE_LEN, "\r\n", 3);
	c->sec = now;
	return 1;
}
