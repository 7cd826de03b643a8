package hotcount.bench.flink;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.StreamReadFeature;
import java.io.IOException;
import java.nio.charset.StandardCharsets;

/**
 * Judges one raw event by the contract of docs/FORMATS.md "Events", as far as Jackson's strict
 * streaming parser can tell: the same rules and the same library as the Kafka Streams baseline
 * (bench/streams, {@code LikeCounts.delta}), so both baselines drop the same events. Kept in
 * this project rather than shared: the Streams one returns a Kafka Streams type, and neither
 * build should depend on the other's.
 *
 * <p>Not modelled (the benchmark workloads contain none): lone surrogate escapes outside the
 * fields read here.
 */
final class LikeEvent {
  static final int MAX_EVENT_BYTES = 4096;
  static final int MAX_POST_ID_BYTES = 256;

  private static final JsonFactory JSON =
      JsonFactory.builder()
          .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION)
          // nesting: the contract's 64 open containers; numbers in unknown fields may have
          // any magnitude, and an event is at most MAX_EVENT_BYTES long
          .streamReadConstraints(
              StreamReadConstraints.builder()
                  .maxNestingDepth(64)
                  .maxNumberLength(MAX_EVENT_BYTES)
                  .build())
          .build();

  /** A valid event's post id (the integer's decimal literal for an integer id). */
  final String post;

  /** +1 for a like, -1 for an unlike. */
  final long delta;

  private LikeEvent(String post, long delta) {
    this.post = post;
    this.delta = delta;
  }

  /** The event's post id and delta, or null for an event hotcount would dead-letter. */
  static LikeEvent parse(byte[] value) {
    if (value == null || value.length == 0 || value.length > MAX_EVENT_BYTES) {
      return null;
    }
    if (value.length >= 3
        && (value[0] & 0xff) == 0xef
        && (value[1] & 0xff) == 0xbb
        && (value[2] & 0xff) == 0xbf) {
      return null; // a byte order mark is not_json; Jackson would skip it
    }
    String post = null;
    long delta = 1;
    try (JsonParser p = JSON.createParser(value)) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        return null;
      }
      JsonToken t;
      while ((t = p.nextToken()) == JsonToken.FIELD_NAME) {
        String name = p.currentName();
        t = p.nextToken();
        switch (name) {
          case "post_id":
            if (t == JsonToken.VALUE_STRING) {
              post = p.getText();
              if (post.isEmpty() || !clean(post)) {
                return null;
              }
            } else if (t == JsonToken.VALUE_NUMBER_INT) {
              post = p.getText(); // the literal: 42 and "42" are one post
              if (post.startsWith("-")) {
                return null; // negative, and -0 too
              }
            } else {
              return null;
            }
            if (post.getBytes(StandardCharsets.UTF_8).length > MAX_POST_ID_BYTES) {
              return null;
            }
            break;
          case "user_id":
            if (t != JsonToken.VALUE_STRING && t != JsonToken.VALUE_NUMBER_INT) {
              return null;
            }
            break;
          case "op":
            if (t != JsonToken.VALUE_STRING) {
              return null;
            }
            String op = p.getText();
            if (op.equals("like")) {
              delta = 1;
            } else if (op.equals("unlike")) {
              delta = -1;
            } else {
              return null;
            }
            break;
          case "ts":
            if (t != JsonToken.VALUE_NUMBER_INT
                || p.getNumberType() == JsonParser.NumberType.BIG_INTEGER) {
              return null;
            }
            break;
          case "event_id":
            if (t != JsonToken.VALUE_STRING) {
              return null;
            }
            break;
          default:
            p.skipChildren();
        }
      }
      if (t != JsonToken.END_OBJECT || p.nextToken() != null || post == null) {
        return null; // truncated, trailing garbage or no post id
      }
    } catch (IOException | RuntimeException e) {
      return null; // not JSON, bad UTF-8, duplicate key, too deep
    }
    return new LikeEvent(post, delta);
  }

  /** No C0, DEL or C1 control character and no unpaired surrogate (post_id's rules). */
  private static boolean clean(String s) {
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c < 0x20 || (c >= 0x7f && c <= 0x9f)) {
        return false;
      }
      if (Character.isHighSurrogate(c)) {
        if (i + 1 >= s.length() || !Character.isLowSurrogate(s.charAt(i + 1))) {
          return false;
        }
        i++;
      } else if (Character.isLowSurrogate(c)) {
        return false;
      }
    }
    return true;
  }
}
