// Drives the official Segment Kotlin SDK (analytics-kotlin, com.segment.analytics.kotlin:core, the
// JVM artifact; version pinned in ../../../pom.xml) the way an application does, for
// test/ingest/sdk-kotlin.test.ts.
//
// Instructions, as JSON, from the first argument or else stdin:
//
//   {"host": "http://127.0.0.1:4000", "writeKey": "...", "flushAt": 20, "flushInterval": 30,
//    "timeoutMs": 15000, "storageDir": "/optional/dir", "defaultSettingsApiHost": false,
//    "calls": [{"type": "identify", "userId": "u1", "traits": {...}},
//              {"type": "track", "event": "Signed Up", "properties": {...}},
//              {"type": "screen", "name": "Settings", "category": "", "properties": {...}},
//              {"type": "group", "groupId": "g1", "traits": {...}},
//              {"type": "alias", "newId": "u2"}]}
//
// The SDK's API is the mobile one: identify remembers the user, and every later call carries that
// userId (and the anonymousId the SDK made up); alias takes only the new id (previousId is the
// current user). There is no page call in analytics-kotlin.
//
// Configuration, as trackhook's README tells mobile users: apiHost = cdnHost = "<host>/v1" (no
// scheme: the SDK builds "https://<apiHost>/b" and "https://<cdnHost>/projects/<key>/settings").
// For a plain-HTTP host (the test's loopback ingest) the only other setting is the SDK's own
// extension point Configuration.requestFactory: a RequestFactory whose openConnection(url) swaps
// the https:// the SDK wrote for http://. With "defaultSettingsApiHost": true the configuration also
// sets defaultSettings to {"integrations": {"Segment.io": {"apiKey": <key>, "apiHost": "<host>/v1"}}}:
// the settings the SDK falls back on when it cannot fetch them (its own fallback says
// api.segment.io/v1, whatever apiHost is). Everything else is the SDK's default, except:
//  - storage: the SDK's own file storage (StorageImpl, PropertiesFile, FileEventStream, exactly as
//    its ConcreteStorageProvider wires them) but under a fresh directory, instead of the fixed
//    /tmp/analytics-kotlin/<writeKey> that would carry users, queued batches and retry state from
//    one run to the next;
//  - containment: nothing leaves the machine. The RequestFactory refuses (IOException) any URL whose
//    host is not the ingest's, and the JVM's default ProxySelector, which every OkHttpClient asks
//    (the SDK's telemetry client included), records each URI and sends any other host to a closed
//    port on 127.0.0.1, so the connection is refused without even a DNS lookup;
//  - observation only: the OkHttpClient given to RequestFactory is the one the SDK builds by default
//    (HTTP/2 + HTTP/1.1, 15 s connect, 20 s read) plus a network interceptor that records each
//    exchange as it goes on the wire; an After plugin that records each event as it leaves the
//    timeline; the SDK's logger (debug logs on) and errorHandler.
//
// Each call is made once the previous one has left the timeline and, for identify and alias, once
// the SDK's user state holds the new userId (the SDK updates it asynchronously; an app's calls are
// spaced by user actions). Then flush(), and the driver waits, once an upload has been attempted,
// until nothing is in flight and either the SDK's event storage is empty (every batch sent and
// deleted) or the SDK has been quiet for 500 ms (a batch kept for a retry), or until timeoutMs. It
// prints one JSON report on stdout and exits 0; 2 for unusable instructions. A storageDir given in
// the instructions is left in place (the SDK may still be writing to it until the JVM exits).
package io.trackhook.sdkdriver

import com.segment.analytics.kotlin.core.AliasEvent
import com.segment.analytics.kotlin.core.Analytics
import com.segment.analytics.kotlin.core.BaseEvent
import com.segment.analytics.kotlin.core.Constants
import com.segment.analytics.kotlin.core.GroupEvent
import com.segment.analytics.kotlin.core.IdentifyEvent
import com.segment.analytics.kotlin.core.RequestFactory
import com.segment.analytics.kotlin.core.ScreenEvent
import com.segment.analytics.kotlin.core.Settings
import com.segment.analytics.kotlin.core.Storage
import com.segment.analytics.kotlin.core.StorageProvider
import com.segment.analytics.kotlin.core.TrackEvent
import com.segment.analytics.kotlin.core.UserInfo
import com.segment.analytics.kotlin.core.platform.EventPlugin
import com.segment.analytics.kotlin.core.platform.Plugin
import com.segment.analytics.kotlin.core.platform.plugins.logger.LogMessage
import com.segment.analytics.kotlin.core.platform.plugins.logger.Logger
import com.segment.analytics.kotlin.core.utilities.FileEventStream
import com.segment.analytics.kotlin.core.utilities.PropertiesFile
import com.segment.analytics.kotlin.core.utilities.StorageImpl
import kotlinx.coroutines.runBlocking
import kotlinx.serialization.json.Json
import kotlinx.serialization.json.JsonArray
import kotlinx.serialization.json.JsonElement
import kotlinx.serialization.json.JsonNull
import kotlinx.serialization.json.JsonObject
import kotlinx.serialization.json.JsonPrimitive
import kotlinx.serialization.json.booleanOrNull
import kotlinx.serialization.json.buildJsonArray
import kotlinx.serialization.json.buildJsonObject
import kotlinx.serialization.json.contentOrNull
import kotlinx.serialization.json.intOrNull
import kotlinx.serialization.json.jsonObject
import kotlinx.serialization.json.jsonPrimitive
import kotlinx.serialization.json.longOrNull
import kotlinx.serialization.json.put
import okhttp3.Headers
import okhttp3.Interceptor
import okhttp3.OkHttpClient
import okhttp3.Protocol
import okhttp3.Response
import okio.Buffer
import okio.GzipSource
import okio.buffer
import java.io.File
import java.io.IOException
import java.net.HttpURLConnection
import java.net.InetSocketAddress
import java.net.Proxy
import java.net.ProxySelector
import java.net.SocketAddress
import java.net.URI
import java.util.Collections
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger
import kotlin.system.exitProcess

private val encoder = Json { encodeDefaults = true }

/** Everything the driver saw, appended to from the SDK's threads. */
private object Record {
    val builtUrls: MutableList<String> = Collections.synchronizedList(mutableListOf())
    val exchanges: MutableList<JsonObject> = Collections.synchronizedList(mutableListOf())
    val connections: MutableList<JsonObject> = Collections.synchronizedList(mutableListOf())
    val events: MutableList<JsonObject> = Collections.synchronizedList(mutableListOf())
    val errors: MutableList<JsonObject> = Collections.synchronizedList(mutableListOf())
    val logs: MutableList<JsonObject> = Collections.synchronizedList(mutableListOf())
    val inFlight = AtomicInteger(0)
    @Volatile var lastActivity = System.currentTimeMillis()
    fun touch() {
        lastActivity = System.currentTimeMillis()
    }
}

private fun headersJson(headers: Headers): JsonObject {
    val grouped = LinkedHashMap<String, MutableList<String>>()
    for (i in 0 until headers.size) grouped.getOrPut(headers.name(i)) { mutableListOf() } += headers.value(i)
    return buildJsonObject { grouped.forEach { (k, v) -> put(k, JsonArray(v.map(::JsonPrimitive))) } }
}

private fun bodyJson(raw: ByteArray, gzip: Boolean): Pair<String, JsonElement> {
    val plain = if (gzip) {
        try {
            GzipSource(Buffer().write(raw)).buffer().readByteArray()
        } catch (e: IOException) {
            return "bodyText" to JsonPrimitive("(not gzip: $e)")
        }
    } else raw
    val text = plain.toString(Charsets.UTF_8)
    return try {
        "body" to Json.parseToJsonElement(text)
    } catch (e: Exception) {
        "bodyText" to JsonPrimitive(text)
    }
}

/** Records each request as OkHttp puts it on the wire, and its answer; changes nothing. */
private class RecordingInterceptor : Interceptor {
    override fun intercept(chain: Interceptor.Chain): Response {
        val request = chain.request()
        val entry = LinkedHashMap<String, JsonElement>()
        entry["method"] = JsonPrimitive(request.method)
        entry["url"] = JsonPrimitive(request.url.toString())
        entry["protocol"] = JsonPrimitive(chain.connection()?.protocol()?.toString())
        entry["headers"] = headersJson(request.headers)
        val body = request.body
        if (body != null && !body.isOneShot()) {
            val buffer = Buffer()
            body.writeTo(buffer)
            val raw = buffer.readByteArray()
            entry["bodyBytes"] = JsonPrimitive(raw.size)
            val (key, value) = bodyJson(raw, request.header("Content-Encoding").equals("gzip", ignoreCase = true))
            entry[key] = value
        }
        val index: Int
        synchronized(Record.exchanges) {
            index = Record.exchanges.size
            Record.exchanges += JsonObject(entry)
        }
        Record.inFlight.incrementAndGet()
        Record.touch()
        try {
            val response = chain.proceed(request)
            val peeked = response.peekBody(1L shl 20).string()
            entry["response"] = buildJsonObject {
                put("status", response.code)
                put("message", response.message)
                put("headers", headersJson(response.headers))
                put("body", peeked)
            }
            entry["error"] = JsonNull
            return response
        } catch (e: IOException) {
            entry["response"] = JsonNull
            entry["error"] = JsonPrimitive(e.toString())
            throw e
        } finally {
            Record.exchanges[index] = JsonObject(entry)
            Record.inFlight.decrementAndGet()
            Record.touch()
        }
    }
}

/**
 * The SDK's RequestFactory with the OkHttpClient it would build itself (plus the recorder). For a
 * plain-HTTP host, openConnection swaps the scheme of the URLs the SDK builds (always https://).
 * A URL for any other host is refused: the test's SDK talks to the ingest under test only.
 */
private class DriverRequestFactory(
    private val ingestAuthority: String,
    private val plainHttp: Boolean,
    client: OkHttpClient,
) : RequestFactory(client) {
    override fun openConnection(url: String): HttpURLConnection {
        Record.builtUrls += url
        Record.touch()
        val authority = URI(url).rawAuthority
        if (authority != ingestAuthority) {
            throw IOException("trackhook-sdk-kotlin-driver: refused $url (only the ingest under test, $ingestAuthority, is reachable)")
        }
        return super.openConnection(if (plainHttp) url.replaceFirst("https://", "http://") else url)
    }
}

/**
 * Records the URI of every connection the JVM opens (OkHttp asks the default ProxySelector). The
 * ingest is reached directly; any other host through a "proxy" on a closed port: refused, locally.
 */
private class ContainingProxySelector(private val ingestAuthority: String) : ProxySelector() {
    override fun select(uri: URI): List<Proxy> {
        val authority = if (uri.port == -1) uri.host else "${uri.host}:${uri.port}"
        val allowed = authority == ingestAuthority
        // The SDK's classes that asked, innermost first (OkHttp connects on the caller's thread).
        val callers = Thread.currentThread().stackTrace.map { it.className.substringBefore('$') }
            .filter { it.startsWith("com.segment.") }.distinct().take(4)
        Record.connections += buildJsonObject {
            put("uri", "${uri.scheme}://$authority")
            put("allowed", allowed)
            put("callers", JsonArray(callers.map(::JsonPrimitive)))
        }
        Record.touch()
        return listOf(if (allowed) Proxy.NO_PROXY else Proxy(Proxy.Type.HTTP, InetSocketAddress("127.0.0.1", 1)))
    }

    override fun connectFailed(uri: URI?, sa: SocketAddress?, ioe: IOException?) {}
}

/** The SDK's file storage, wired as its ConcreteStorageProvider does, under [root] instead of /tmp/analytics-kotlin. */
private class DirectoryStorageProvider(private val root: File) : StorageProvider {
    override fun createStorage(vararg params: Any): Storage {
        val analytics = params[0] as Analytics
        val writeKey = analytics.configuration.writeKey
        val directory = File(root, writeKey)
        return StorageImpl(
            PropertiesFile(File(directory, "analytics-kotlin-$writeKey.properties")),
            FileEventStream(File(directory, "events")),
            analytics.store,
            writeKey,
            "segment.events.file.index.$writeKey",
            analytics.fileIODispatcher,
        )
    }
}

/** Records each event as it leaves the timeline (after the Segment destination has queued it). */
private class RecordingPlugin : EventPlugin {
    override val type = Plugin.Type.After
    override lateinit var analytics: Analytics

    private fun record(event: BaseEvent): BaseEvent {
        val json = when (event) {
            is IdentifyEvent -> encoder.encodeToJsonElement(IdentifyEvent.serializer(), event)
            is TrackEvent -> encoder.encodeToJsonElement(TrackEvent.serializer(), event)
            is ScreenEvent -> encoder.encodeToJsonElement(ScreenEvent.serializer(), event)
            is GroupEvent -> encoder.encodeToJsonElement(GroupEvent.serializer(), event)
            is AliasEvent -> encoder.encodeToJsonElement(AliasEvent.serializer(), event)
        }
        Record.events += json.jsonObject
        Record.touch()
        return event
    }

    override fun identify(payload: IdentifyEvent): BaseEvent = record(payload)
    override fun track(payload: TrackEvent): BaseEvent = record(payload)
    override fun screen(payload: ScreenEvent): BaseEvent = record(payload)
    override fun group(payload: GroupEvent): BaseEvent = record(payload)
    override fun alias(payload: AliasEvent): BaseEvent = record(payload)
}

private fun fail(message: String): Nothing {
    System.err.println("trackhook-sdk-kotlin-driver: $message")
    exitProcess(2)
}

private fun JsonObject.string(key: String): String? = this[key]?.jsonPrimitive?.contentOrNull
private fun JsonObject.obj(key: String): JsonObject = (this[key] as? JsonObject) ?: JsonObject(emptyMap())

private fun waitUntil(deadline: Long, condition: () -> Boolean): Boolean {
    while (!condition()) {
        if (System.currentTimeMillis() > deadline) return false
        Thread.sleep(20)
    }
    return true
}

private fun settingsJson(settings: Settings?): JsonElement =
    if (settings == null) JsonNull else encoder.encodeToJsonElement(Settings.serializer(), settings)

fun main(args: Array<String>) {
    val started = System.currentTimeMillis()
    val text = if (args.isNotEmpty()) args[0] else System.`in`.readBytes().toString(Charsets.UTF_8)
    val input = try {
        Json.parseToJsonElement(text).jsonObject
    } catch (e: Exception) {
        fail("instructions: $e")
    }
    val host = input.string("host") ?: fail("instructions: host is required")
    val writeKey = input.string("writeKey") ?: fail("instructions: writeKey is required")
    val plainHttp = host.startsWith("http://")
    val hostAndPath = host.removePrefix("http://").removePrefix("https://").trimEnd('/')
    val ingestAuthority = hostAndPath.substringBefore('/')
    val defaultSettingsApiHost = input["defaultSettingsApiHost"]?.jsonPrimitive?.booleanOrNull ?: false
    val timeoutMs = input["timeoutMs"]?.jsonPrimitive?.longOrNull ?: 15_000L
    val calls = (input["calls"] as? JsonArray ?: fail("instructions: calls is required")).map { it.jsonObject }
    val storageRoot = input.string("storageDir")?.let(::File)
        ?: kotlin.io.path.createTempDirectory("trackhook-sdk-kotlin-").toFile().also { it.deleteOnExit() }

    ProxySelector.setDefault(ContainingProxySelector(ingestAuthority))
    Analytics.debugLogsEnabled = true
    Analytics.setLogger(object : Logger {
        override fun parseLog(log: LogMessage) {
            System.err.println("analytics-kotlin ${log.kind}: ${log.message}")
            Record.logs += buildJsonObject {
                put("kind", log.kind.name)
                put("message", log.message)
            }
            Record.touch()
        }
    })

    // What RequestFactory() builds by default, plus the recorder.
    val client = OkHttpClient.Builder()
        .protocols(listOf(Protocol.HTTP_2, Protocol.HTTP_1_1))
        .connectTimeout(15, TimeUnit.SECONDS)
        .readTimeout(20, TimeUnit.SECONDS)
        .addNetworkInterceptor(RecordingInterceptor())
        .build()

    val analytics = Analytics(writeKey) {
        application = "trackhook-sdk-kotlin-driver"
        apiHost = "$hostAndPath/v1"
        cdnHost = "$hostAndPath/v1"
        input["flushAt"]?.jsonPrimitive?.intOrNull?.let { flushAt = it }
        input["flushInterval"]?.jsonPrimitive?.intOrNull?.let { flushInterval = it }
        storageProvider = DirectoryStorageProvider(storageRoot)
        requestFactory = DriverRequestFactory(ingestAuthority, plainHttp, client)
        if (defaultSettingsApiHost) {
            defaultSettings = Settings(
                integrations = buildJsonObject {
                    put("Segment.io", buildJsonObject {
                        put("apiKey", writeKey)
                        put("apiHost", "$hostAndPath/v1")
                    })
                },
            )
        }
        errorHandler = { error ->
            System.err.println("analytics-kotlin errorHandler: $error")
            Record.errors += buildJsonObject {
                put("class", error.javaClass.name)
                put("message", error.message)
                put("cause", error.cause?.toString())
            }
            Record.touch()
        }
    }
    analytics.add(RecordingPlugin())
    val configured = buildJsonObject {
        put("apiHost", analytics.configuration.apiHost)
        put("cdnHost", analytics.configuration.cdnHost)
        put("flushAt", analytics.configuration.flushAt)
        put("flushInterval", analytics.configuration.flushInterval)
        put("application", analytics.configuration.application.toString())
        put("defaultSettings", settingsJson(analytics.configuration.defaultSettings))
    }
    val storedUserId = { runBlocking { analytics.store.currentState(UserInfo::class)?.userId } }

    val deadline = started + timeoutMs
    val made = buildJsonArray {
        for ((i, call) in calls.withIndex()) {
            val seen = Record.events.size
            var expectUserId: String? = null
            when (val type = call.string("type")) {
                "identify" -> {
                    expectUserId = call.string("userId") ?: fail("instructions: call $i: userId is required")
                    analytics.identify(expectUserId, call.obj("traits"))
                }
                "track" -> analytics.track(call.string("event") ?: fail("instructions: call $i: event is required"), call.obj("properties"))
                "screen" -> analytics.screen(
                    call.string("name") ?: fail("instructions: call $i: name is required"),
                    call.obj("properties"),
                    call.string("category") ?: "",
                )
                "group" -> analytics.group(call.string("groupId") ?: fail("instructions: call $i: groupId is required"), call.obj("traits"))
                "alias" -> {
                    expectUserId = call.string("newId") ?: fail("instructions: call $i: newId is required")
                    analytics.alias(expectUserId)
                }
                else -> fail("instructions: call $i: unknown type $type")
            }
            val processed = waitUntil(deadline) { Record.events.size > seen }
            val settled = expectUserId == null || waitUntil(deadline) { storedUserId() == expectUserId }
            add(buildJsonObject {
                put("type", call.string("type"))
                put("processed", processed)
                put("userIdSettled", settled)
            })
        }
    }

    val flushedAt = System.currentTimeMillis()
    val uploadsBefore = Record.builtUrls.count { it.endsWith("/b") }
    analytics.flush()
    val eventsDir = File(File(storageRoot, writeKey), "events")
    val pending = { (eventsDir.listFiles() ?: emptyArray()).map { it.name }.sorted() }
    val drained = waitUntil(deadline) {
        // With no calls, nothing to upload: only the settings fetch to see through.
        (calls.isEmpty() || Record.builtUrls.count { it.endsWith("/b") } > uploadsBefore) &&
            Record.inFlight.get() == 0 &&
            (pending().isEmpty() || System.currentTimeMillis() - Record.lastActivity > 500) &&
            (calls.isNotEmpty() || (Record.exchanges.isNotEmpty() && System.currentTimeMillis() - Record.lastActivity > 300))
    }
    val waitedMs = System.currentTimeMillis() - flushedAt

    val report = buildJsonObject {
        put("sdk", buildJsonObject {
            put("artifact", "com.segment.analytics.kotlin:core")
            put("version", Constants.LIBRARY_VERSION)
            put("analyticsVersion", analytics.version())
        })
        put("configuration", configured)
        put("calls", made)
        put("events", JsonArray(Record.events.toList()))
        put("builtUrls", JsonArray(Record.builtUrls.toList().map(::JsonPrimitive)))
        put("exchanges", JsonArray(Record.exchanges.toList()))
        put("connections", JsonArray(Record.connections.toList().distinct()))
        put("errors", JsonArray(Record.errors.toList()))
        put("logs", JsonArray(Record.logs.toList()))
        put("state", buildJsonObject {
            put("userId", storedUserId())
            put("anonymousId", analytics.anonymousId())
            put("settings", settingsJson(analytics.settings()))
            put("pendingUploads", JsonArray(analytics.pendingUploads().map(::JsonPrimitive)))
            put("storedFiles", JsonArray(pending().map(::JsonPrimitive)))
        })
        put("drained", drained)
        put("waitedMs", waitedMs)
        put("totalMs", System.currentTimeMillis() - started)
    }
    println(Json.encodeToString(JsonObject.serializer(), report))
    System.out.flush()
    if (input.string("storageDir") == null) storageRoot.deleteRecursively()
    exitProcess(0)
}
