// Drives the official Segment Java SDK (analytics-java, com.segment.analytics.java:analytics;
// version pinned in ../../../../../../pom.xml) the way a server application does, for
// test/ingest/sdk-java.test.ts.
//
// Instructions, as JSON, from the first argument or else stdin:
//
//   {"host": "http://127.0.0.1:4000", "writeKey": "...", "timeoutMs": 15000,
//    "uploadURL": null, "flushQueueSize": null, "retries": null,
//    "calls": [{"type": "identify", "userId": "u1", "traits": {...}},
//              {"type": "track", "userId": "u1", "event": "Signed Up", "properties": {...}},
//              {"type": "page", "anonymousId": "a1", "name": "Home", "category": "Docs", "properties": {...}},
//              {"type": "screen", "userId": "u1", "name": "Settings", "properties": {...}},
//              {"type": "group", "userId": "u1", "groupId": "g1", "traits": {...}},
//              {"type": "alias", "userId": "u2", "previousId": "u1"}]}
//
// Every call may also carry anonymousId, userId, context (a map), integrations ({"Key": true|false|
// {options}}), timestamp (ISO-8601 with an offset, for an import of past data), messageId, and
// "via": "offer" to hand the message to Analytics.offer instead of Analytics.enqueue.
//
// Configuration, as an application does it: Analytics.builder(writeKey).endpoint(host) (the SDK
// appends its path, "/v1/import/"), or, with "uploadURL" set, .setUploadURL(uploadURL) instead (the
// whole URL, used as given). flushQueueSize and retries, when given, go to the builder's options of
// those names; everything else is the SDK's default (flush every 10 s or at 250 messages, 3 retries).
// The driver adds, to observe only:
//  - callback(Callback): each message's success or failure (the SDK's per-message outcome);
//  - log(Log): the SDK's own log lines (it logs nothing unless given a Log), and with it the lines of
//    the HttpLoggingInterceptor (level BASIC) the SDK installs;
//  - client(OkHttpClient): the client Platform.defaultClient() builds (15 s connect, read and write
//    timeouts) plus a network interceptor that records each exchange as it goes on the wire (the
//    SDK adds its User-Agent and logging interceptors to it, as to its own default);
//  - containment: the JVM's default ProxySelector, which OkHttp asks for every connection, records
//    each URI and sends any host but the ingest's to a closed port on 127.0.0.1, so the connection is
//    refused without even a DNS lookup. Nothing leaves the machine.
//
// After the calls, flush() and shutdown(), as an application does on exit. shutdown() waits at most
// 5 s for the SDK's looper and 1 s for its network thread, so the driver then waits until every
// message enqueued has had its callback and nothing is in flight, or until timeoutMs. It prints one
// JSON report on stdout and exits 0 (whatever the SDK's threads are still doing); 2 for unusable
// instructions.
package io.trackhook.sdkdriver;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.google.gson.ToNumberPolicy;
import com.google.gson.reflect.TypeToken;
import com.segment.analytics.Analytics;
import com.segment.analytics.Callback;
import com.segment.analytics.Log;
import com.segment.analytics.internal.AnalyticsVersion;
import com.segment.analytics.messages.AliasMessage;
import com.segment.analytics.messages.GroupMessage;
import com.segment.analytics.messages.IdentifyMessage;
import com.segment.analytics.messages.Message;
import com.segment.analytics.messages.MessageBuilder;
import com.segment.analytics.messages.PageMessage;
import com.segment.analytics.messages.ScreenMessage;
import com.segment.analytics.messages.TrackMessage;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.lang.reflect.Type;
import java.net.InetSocketAddress;
import java.net.Proxy;
import java.net.ProxySelector;
import java.net.SocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Date;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import java.util.zip.GZIPInputStream;
import okhttp3.Headers;
import okhttp3.HttpUrl;
import okhttp3.Interceptor;
import okhttp3.OkHttpClient;
import okhttp3.Request;
import okhttp3.Response;
import okio.Buffer;

public final class Driver {
  private Driver() {}

  /** The driver's own JSON: numbers kept as written (no 3 turned into 3.0), nulls kept, no HTML escaping. */
  private static final Gson JSON =
      new GsonBuilder()
          .setObjectToNumberStrategy(ToNumberPolicy.LONG_OR_DOUBLE)
          .serializeNulls()
          .disableHtmlEscaping()
          .create();

  private static final Type MAP = new TypeToken<Map<String, Object>>() {}.getType();

  /** What the driver saw, from the SDK's threads and its own. */
  static final class Record {
    static final List<JsonObject> exchanges = Collections.synchronizedList(new ArrayList<>());
    static final List<JsonObject> connections = Collections.synchronizedList(new ArrayList<>());
    static final List<JsonObject> callbacks = Collections.synchronizedList(new ArrayList<>());
    static final List<JsonObject> logs = Collections.synchronizedList(new ArrayList<>());
    static final AtomicInteger inFlight = new AtomicInteger();
  }

  private static JsonObject headersJson(Headers headers) {
    JsonObject out = new JsonObject();
    for (String name : headers.names()) {
      JsonArray values = new JsonArray();
      for (String value : headers.values(name)) values.add(value);
      out.add(name, values);
    }
    return out;
  }

  private static String describe(Throwable error) {
    return error == null ? null : error.getClass().getName() + ": " + error.getMessage();
  }

  /**
   * Records each exchange as it goes on the wire (a network interceptor: after the SDK's own
   * interceptors and OkHttp's, with the headers actually sent). It reads copies only: the request
   * body is written into a buffer, the answer is peeked.
   */
  static final class RecordingInterceptor implements Interceptor {
    @Override
    public Response intercept(Chain chain) throws IOException {
      Request request = chain.request();
      JsonObject entry = new JsonObject();
      entry.addProperty("method", request.method());
      entry.addProperty("url", request.url().toString());
      entry.addProperty("protocol", chain.connection() == null ? null : chain.connection().protocol().toString());
      entry.add("headers", headersJson(request.headers()));
      if (request.body() != null) {
        Buffer buffer = new Buffer();
        request.body().writeTo(buffer);
        byte[] bytes = buffer.readByteArray();
        entry.addProperty("bodyBytes", bytes.length);
        byte[] decoded = bytes;
        if ("gzip".equalsIgnoreCase(request.header("Content-Encoding"))) {
          try (InputStream in = new GZIPInputStream(new ByteArrayInputStream(bytes))) {
            decoded = in.readAllBytes();
          }
        }
        String text = new String(decoded, StandardCharsets.UTF_8);
        entry.addProperty("bodyText", text);
        try {
          entry.add("body", JsonParser.parseString(text));
        } catch (RuntimeException notJson) {
          entry.add("body", JsonNull.INSTANCE);
        }
      }
      Record.inFlight.incrementAndGet();
      try {
        Response response = chain.proceed(request);
        JsonObject answer = new JsonObject();
        answer.addProperty("status", response.code());
        answer.addProperty("message", response.message());
        answer.add("headers", headersJson(response.headers()));
        answer.addProperty("body", response.peekBody(1L << 20).string());
        entry.add("response", answer);
        entry.add("error", JsonNull.INSTANCE);
        return response;
      } catch (IOException e) {
        entry.add("response", JsonNull.INSTANCE);
        entry.addProperty("error", e.toString());
        throw e;
      } finally {
        Record.exchanges.add(entry);
        Record.inFlight.decrementAndGet();
      }
    }
  }

  /**
   * Records the URI of every connection OkHttp opens. The ingest is reached directly; any other host
   * through a "proxy" on a closed port: refused, locally.
   */
  static final class ContainingProxySelector extends ProxySelector {
    private final String ingestAuthority;

    ContainingProxySelector(String ingestAuthority) {
      this.ingestAuthority = ingestAuthority;
    }

    @Override
    public List<Proxy> select(URI uri) {
      String authority = uri.getPort() == -1 ? uri.getHost() : uri.getHost() + ":" + uri.getPort();
      boolean allowed = authority.equals(ingestAuthority);
      JsonObject entry = new JsonObject();
      entry.addProperty("uri", uri.getScheme() + "://" + authority);
      entry.addProperty("allowed", allowed);
      Record.connections.add(entry);
      return List.of(allowed ? Proxy.NO_PROXY : new Proxy(Proxy.Type.HTTP, new InetSocketAddress("127.0.0.1", 1)));
    }

    @Override
    public void connectFailed(URI uri, SocketAddress sa, IOException ioe) {}
  }

  static final class RecordingCallback implements Callback {
    private void record(String outcome, Message message, Throwable error) {
      JsonObject entry = new JsonObject();
      entry.addProperty("outcome", outcome);
      entry.addProperty("type", message.type().name());
      entry.addProperty("messageId", message.messageId());
      entry.addProperty("error", describe(error));
      Record.callbacks.add(entry);
    }

    @Override
    public void success(Message message) {
      record("success", message, null);
    }

    @Override
    public void failure(Message message, Throwable throwable) {
      record("failure", message, throwable);
    }
  }

  static final class RecordingLog implements Log {
    private void record(Level level, Throwable error, String format, Object... args) {
      String text;
      try {
        text = String.format(format, args);
      } catch (RuntimeException e) {
        text = format;
      }
      System.err.println("analytics-java " + level + ": " + text + (error == null ? "" : " (" + error + ")"));
      JsonObject entry = new JsonObject();
      entry.addProperty("level", level.name());
      entry.addProperty("text", text);
      entry.addProperty("error", describe(error));
      Record.logs.add(entry);
    }

    @Override
    public void print(Level level, String format, Object... args) {
      record(level, null, format, args);
    }

    @Override
    public void print(Level level, Throwable error, String format, Object... args) {
      record(level, error, format, args);
    }
  }

  private static void fail(String message) {
    System.err.println("trackhook-sdk-java-driver: " + message);
    System.exit(2);
  }

  private static String string(JsonObject o, String key) {
    JsonElement e = o.get(key);
    return e == null || e.isJsonNull() ? null : e.getAsString();
  }

  private static String required(JsonObject call, int i, String key) {
    String value = string(call, key);
    if (value == null) fail("instructions: call " + i + ": " + key + " is required");
    return value;
  }

  private static Map<String, Object> map(JsonObject o, String key) {
    JsonElement e = o.get(key);
    return e == null || e.isJsonNull() ? null : JSON.fromJson(e, MAP);
  }

  private static boolean waitUntil(long deadline, BooleanSupplier condition) throws InterruptedException {
    while (!condition.getAsBoolean()) {
      if (System.currentTimeMillis() > deadline) return false;
      Thread.sleep(20);
    }
    return true;
  }

  /** The SDK's builder for one call, filled in as an application does. */
  private static MessageBuilder<?, ?> builderFor(JsonObject call, int i) {
    String type = string(call, "type");
    if (type == null) fail("instructions: call " + i + ": type is required");
    MessageBuilder<?, ?> builder;
    switch (type) {
      case "identify": {
        IdentifyMessage.Builder b = IdentifyMessage.builder();
        if (map(call, "traits") != null) b.traits(map(call, "traits"));
        builder = b;
        break;
      }
      case "track": {
        TrackMessage.Builder b = TrackMessage.builder(required(call, i, "event"));
        if (map(call, "properties") != null) b.properties(map(call, "properties"));
        builder = b;
        break;
      }
      case "page": {
        PageMessage.Builder b = PageMessage.builder(required(call, i, "name"));
        if (map(call, "properties") != null) b.properties(map(call, "properties"));
        if (string(call, "category") != null) b.category(string(call, "category"));
        builder = b;
        break;
      }
      case "screen": {
        ScreenMessage.Builder b = ScreenMessage.builder(required(call, i, "name"));
        if (map(call, "properties") != null) b.properties(map(call, "properties"));
        builder = b;
        break;
      }
      case "group": {
        GroupMessage.Builder b = GroupMessage.builder(required(call, i, "groupId"));
        if (map(call, "traits") != null) b.traits(map(call, "traits"));
        builder = b;
        break;
      }
      case "alias":
        builder = AliasMessage.builder(required(call, i, "previousId"));
        break;
      default:
        fail("instructions: call " + i + ": unknown type " + type);
        return null;
    }
    if (string(call, "userId") != null) builder.userId(string(call, "userId"));
    if (string(call, "anonymousId") != null) builder.anonymousId(string(call, "anonymousId"));
    if (string(call, "messageId") != null) builder.messageId(string(call, "messageId"));
    if (map(call, "context") != null) builder.context(map(call, "context"));
    if (string(call, "timestamp") != null) {
      builder.timestamp(Date.from(OffsetDateTime.parse(string(call, "timestamp")).toInstant()));
    }
    Map<String, Object> integrations = map(call, "integrations");
    if (integrations != null) {
      for (Map.Entry<String, Object> e : integrations.entrySet()) {
        if (e.getValue() instanceof Boolean) {
          builder.enableIntegration(e.getKey(), (Boolean) e.getValue());
        } else {
          @SuppressWarnings("unchecked")
          Map<String, ?> options = (Map<String, ?>) e.getValue();
          builder.integrationOptions(e.getKey(), options);
        }
      }
    }
    return builder;
  }

  public static void main(String[] args) throws Exception {
    long started = System.currentTimeMillis();
    String text = args.length > 0 ? args[0] : new String(System.in.readAllBytes(), StandardCharsets.UTF_8);
    JsonObject input = null;
    try {
      input = JsonParser.parseString(text).getAsJsonObject();
    } catch (RuntimeException e) {
      fail("instructions: " + e);
    }
    String host = string(input, "host");
    if (host == null) fail("instructions: host is required");
    String writeKey = string(input, "writeKey");
    if (writeKey == null) fail("instructions: writeKey is required");
    String uploadURL = string(input, "uploadURL");
    long timeoutMs = input.has("timeoutMs") ? input.get("timeoutMs").getAsLong() : 15_000L;
    if (!input.has("calls") || !input.get("calls").isJsonArray()) fail("instructions: calls is required");
    JsonArray calls = input.getAsJsonArray("calls");
    HttpUrl hostUrl = HttpUrl.parse(host);
    if (hostUrl == null) fail("instructions: host is not an http(s) URL: " + host);
    String ingestAuthority = hostUrl.host() + ":" + hostUrl.port();

    ProxySelector.setDefault(new ContainingProxySelector(ingestAuthority));

    // What Platform.defaultClient() builds, plus the recorder.
    OkHttpClient client =
        new OkHttpClient.Builder()
            .connectTimeout(15, TimeUnit.SECONDS)
            .readTimeout(15, TimeUnit.SECONDS)
            .writeTimeout(15, TimeUnit.SECONDS)
            .addNetworkInterceptor(new RecordingInterceptor())
            .build();

    Analytics.Builder builder = Analytics.builder(writeKey);
    if (uploadURL == null) {
      builder.endpoint(host);
    } else {
      builder.setUploadURL(uploadURL);
    }
    if (input.has("flushQueueSize")) builder.flushQueueSize(input.get("flushQueueSize").getAsInt());
    if (input.has("retries")) builder.retries(input.get("retries").getAsInt());
    builder.client(client).log(new RecordingLog()).callback(new RecordingCallback());
    Analytics analytics = builder.build();

    JsonObject configuration = new JsonObject();
    configuration.addProperty("endpoint", builder.endpoint == null ? null : builder.endpoint.toString());
    configuration.addProperty("uploadURL", builder.uploadURL == null ? null : builder.uploadURL.toString());

    JsonArray made = new JsonArray();
    int queued = 0;
    for (int i = 0; i < calls.size(); i++) {
      JsonObject call = calls.get(i).getAsJsonObject();
      MessageBuilder<?, ?> message = builderFor(call, i);
      boolean offer = "offer".equals(string(call, "via"));
      JsonObject entry = new JsonObject();
      entry.addProperty("type", string(call, "type"));
      entry.addProperty("via", offer ? "offer" : "enqueue");
      try {
        if (offer) {
          boolean taken = analytics.offer(message);
          entry.addProperty("taken", taken);
          if (taken) queued++;
        } else {
          analytics.enqueue(message);
          queued++;
        }
        entry.add("error", JsonNull.INSTANCE);
      } catch (RuntimeException e) {
        entry.addProperty("error", describe(e));
      }
      made.add(entry);
    }

    // As an application does on exit.
    long flushedAt = System.currentTimeMillis();
    analytics.flush();
    analytics.shutdown();
    long shutdownMs = System.currentTimeMillis() - flushedAt;
    int expected = queued;
    boolean drained =
        waitUntil(started + timeoutMs, () -> Record.callbacks.size() >= expected && Record.inFlight.get() == 0);
    long waitedMs = System.currentTimeMillis() - flushedAt;

    JsonObject report = new JsonObject();
    JsonObject sdk = new JsonObject();
    sdk.addProperty("artifact", "com.segment.analytics.java:analytics");
    sdk.addProperty("version", AnalyticsVersion.get());
    report.add("sdk", sdk);
    report.add("configuration", configuration);
    report.add("calls", made);
    report.add("callbacks", JSON.toJsonTree(snapshot(Record.callbacks)));
    report.add("exchanges", JSON.toJsonTree(snapshot(Record.exchanges)));
    report.add("connections", JSON.toJsonTree(distinct(snapshot(Record.connections))));
    report.add("logs", JSON.toJsonTree(snapshot(Record.logs)));
    report.addProperty("drained", drained);
    report.addProperty("shutdownMs", shutdownMs);
    report.addProperty("waitedMs", waitedMs);
    report.addProperty("totalMs", System.currentTimeMillis() - started);
    System.out.println(JSON.toJson(report));
    System.out.flush();
    System.exit(0);
  }

  private static List<JsonObject> snapshot(List<JsonObject> list) {
    synchronized (list) {
      return new ArrayList<>(list);
    }
  }

  private static List<JsonObject> distinct(List<JsonObject> list) {
    List<JsonObject> out = new ArrayList<>();
    for (JsonObject o : list) if (!out.contains(o)) out.add(o);
    return out;
  }
}
