/* The one sequential step of decoding Kafka records into columns: where each record's body starts and ends.
 *
 * Every record of a v2 batch starts with its length (a zig-zag varint), so record i+1's position depends on
 * record i's length: no vectorised numpy form exists, and a Python loop over records costs ~0.4 us each, two
 * thirds of the Spark source's decode time (bench/spark_bench.py). This walk is strata.spark.columnar's
 * _record_bodies in C, loaded with ctypes (no Python API, no reference counts); columnar.py keeps the numpy
 * walk as the fallback when this library was not built, and tests check that both give the same answer,
 * or the same error, on valid and malformed input alike.
 *
 * Every read is bounds-checked against the batch's records section [starts[i], ends[i]), and those against
 * the buffer: malformed input returns an error code, never reads outside the buffer.
 */
#include <stdint.h>
#include <string.h>

#define MAX_VARINT_BYTES 10

enum {
    WALK_OK = 0,
    WALK_RUNS_PAST = 1,     /* a record starts at or past its section's end */
    WALK_BAD_LENGTH = 2,    /* a length varint longer than 10 bytes or cut by the section's end */
    WALK_NEGATIVE = 3,      /* a negative record length */
    WALK_NOT_ADDING_UP = 4, /* the records do not end exactly at the section's end */
    WALK_BAD_SECTION = 5,   /* a section outside the buffer */
};

/* Fills body[k] / body_end[k] for every record k of every batch (batch i's records at out_base[i] onward,
 * in order); returns WALK_OK or an error code, with *failed_batch set to the batch it concerns. */
int strata_record_bodies(const uint8_t *buf, int64_t buf_len, int64_t batches, const int64_t *starts,
                         const int64_t *ends, const int64_t *counts, int64_t *body, int64_t *body_end,
                         int64_t *failed_batch) {
    int64_t k = 0;
    for (int64_t i = 0; i < batches; i++) {
        int64_t p = starts[i];
        int64_t end = ends[i];
        int64_t n = counts[i];
        *failed_batch = i;
        if (p < 0 || end < p || end > buf_len || n < 0)
            return WALK_BAD_SECTION;
        for (int64_t r = 0; r < n; r++, k++) {
            if (p >= end)
                return WALK_RUNS_PAST;
            uint64_t raw = 0;
            int shift = 0;
            for (;;) {
                if (p >= end || shift >= 7 * MAX_VARINT_BYTES)
                    return WALK_BAD_LENGTH;
                uint8_t byte = buf[p++];
                if (shift == 63 && (byte & 0x7E))
                    return WALK_BAD_LENGTH; /* bits past 64: no length fits */
                raw |= (uint64_t)(byte & 0x7F) << shift;
                if (byte < 0x80)
                    break;
                shift += 7;
            }
            int64_t length = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            if (length < 0)
                return WALK_NEGATIVE;
            if (length > end - p)
                return r + 1 == n ? WALK_NOT_ADDING_UP : WALK_RUNS_PAST;
            body[k] = p;
            p += length;
            body_end[k] = p;
        }
        if (p != end)
            return WALK_NOT_ADDING_UP;
    }
    return WALK_OK;
}

/* A zig-zag varint of at most 10 bytes within [*p, end); 0 when it is cut short or too long. */
static int read_varint(const uint8_t *buf, int64_t *p, int64_t end, int64_t *value) {
    uint64_t raw = 0;
    int shift = 0;
    int64_t q = *p;
    for (;;) {
        if (q >= end || shift >= 7 * MAX_VARINT_BYTES)
            return 0;
        uint8_t byte = buf[q++];
        if (shift == 63 && (byte & 0x7E))
            return 0;
        raw |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80)
            break;
        shift += 7;
    }
    *p = q;
    *value = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 1;
}

/* A length-prefixed field (a key or a value; a negative length is null and takes no bytes) within [*p, end). */
static int read_bytes(const uint8_t *buf, int64_t *p, int64_t end, int64_t *start, int64_t *len) {
    if (!read_varint(buf, p, end, len))
        return WALK_BAD_LENGTH;
    *start = *p;
    if (*len > 0) {
        if (*len > end - *p)
            return WALK_RUNS_PAST;
        *p += *len;
    }
    return WALK_OK;
}

/* The fields of every record whose body is [body[i], body_end[i]): the timestamp and offset deltas, where the
 * key and value start and their lengths (negative: null, as Kafka reads them), the header count and the
 * position after it. A record without headers must end exactly there; the headers of the others are
 * decoded by the caller (columnar.py), from ``after``. Returns WALK_OK or an error code, *failed_record set. */
int strata_record_fields(const uint8_t *buf, int64_t buf_len, int64_t n, const int64_t *body,
                         const int64_t *body_end, int64_t *ts_delta, int64_t *offset_delta, int64_t *key_start,
                         int64_t *key_len, int64_t *value_start, int64_t *value_len, int64_t *header_count,
                         int64_t *after, int64_t *failed_record) {
    for (int64_t i = 0; i < n; i++) {
        int64_t p = body[i];
        int64_t end = body_end[i];
        *failed_record = i;
        if (p < 0 || end < p || end > buf_len)
            return WALK_BAD_SECTION;
        p += 1; /* attributes: unused */
        if (!read_varint(buf, &p, end, &ts_delta[i]) || !read_varint(buf, &p, end, &offset_delta[i]))
            return WALK_BAD_LENGTH;
        int code = read_bytes(buf, &p, end, &key_start[i], &key_len[i]);
        if (code == WALK_OK)
            code = read_bytes(buf, &p, end, &value_start[i], &value_len[i]);
        if (code != WALK_OK)
            return code;
        if (!read_varint(buf, &p, end, &header_count[i]))
            return WALK_BAD_LENGTH;
        after[i] = p;
        if (header_count[i] == 0 && p != end)
            return WALK_NOT_ADDING_UP;
    }
    return WALK_OK;
}

/* An Arrow binary column's buffers from fields of ``buf``: field i is [start[i], start[i] + len[i]) (a
 * negative length: null, no bytes). Writes offsets[0..n] (int32) and the fields back to back into ``out``
 * (``out_len`` bytes, their total). Returns WALK_OK, or WALK_BAD_SECTION when a field lies outside the buffer
 * or the total is not ``out_len`` (the caller computed it) or exceeds int32 (Arrow's binary type). */
int strata_gather(const uint8_t *buf, int64_t buf_len, int64_t n, const int64_t *start, const int64_t *len,
                  int32_t *offsets, uint8_t *out, int64_t out_len) {
    int64_t at = 0;
    offsets[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t l = len[i];
        if (l > 0) {
            int64_t s = start[i];
            if (s < 0 || s > buf_len || l > buf_len - s || l > out_len - at)
                return WALK_BAD_SECTION;
            memcpy(out + at, buf + s, (size_t)l);
            at += l;
        }
        if (at > INT32_MAX)
            return WALK_BAD_SECTION;
        offsets[i + 1] = (int32_t)at;
    }
    return at == out_len ? WALK_OK : WALK_BAD_SECTION;
}
