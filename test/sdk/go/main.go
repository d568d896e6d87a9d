// Command trackhook-sdk-go-driver drives the official Segment Go SDK
// (github.com/segmentio/analytics-go/v3) the way an application does, for
// test/ingest/sdk-go.test.ts.
//
// It reads its instructions as JSON from the first argument, or from stdin when there is none:
//
//	{"endpoint": "http://127.0.0.1:4000", "writeKey": "...", "batchSize": 100, "intervalMs": 60000,
//	 "defaultContext": {"app": {"name": "shop"}},
//	 "calls": [{"type": "track", "userId": "u1", "event": "Signed Up", "properties": {...}}, ...]}
//
// A call has a type (identify, track, page, screen, group or alias) and the fields of that
// type's struct in the SDK: userId, anonymousId, event, name, groupId, previousId, properties,
// traits, integrations, context (decoded into analytics.Context), contextExtra (its Extra),
// messageId and timestamp (RFC 3339; both left for the SDK to fill when absent).
//
// It builds the client with analytics.NewWithConfig, enqueues every call, closes the client (which
// flushes), and prints one JSON report on stdout: the SDK's version, what Enqueue returned, every
// Callback.Success / Callback.Failure, every line the SDK logged, and every HTTP exchange. The
// exchanges are recorded by a Transport that wraps http.DefaultTransport (what the SDK uses when
// none is configured) without changing the request: it reads the body through GetBody.
// The exit status is 0 whenever a report was printed, whatever the SDK reported; 2 for unusable
// instructions.
package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"time"

	// Offsets of any TZ the test picks, on machines without a zoneinfo database.
	_ "time/tzdata"

	"github.com/segmentio/analytics-go/v3"
)

const sdkModule = "github.com/segmentio/analytics-go/v3"

type instructions struct {
	Endpoint       string             `json:"endpoint"`
	WriteKey       string             `json:"writeKey"`
	BatchSize      int                `json:"batchSize"`
	IntervalMs     int                `json:"intervalMs"`
	DefaultContext *analytics.Context `json:"defaultContext"`
	Calls          []call             `json:"calls"`
}

type call struct {
	Type         string                 `json:"type"`
	MessageId    string                 `json:"messageId"`
	UserId       string                 `json:"userId"`
	AnonymousId  string                 `json:"anonymousId"`
	Event        string                 `json:"event"`
	Name         string                 `json:"name"`
	GroupId      string                 `json:"groupId"`
	PreviousId   string                 `json:"previousId"`
	Properties   map[string]interface{} `json:"properties"`
	Traits       map[string]interface{} `json:"traits"`
	Integrations map[string]interface{} `json:"integrations"`
	Context      *analytics.Context     `json:"context"`
	ContextExtra map[string]interface{} `json:"contextExtra"`
	Timestamp    string                 `json:"timestamp"`
}

type report struct {
	SDK       sdkInfo         `json:"sdk"`
	Enqueued  []enqueueResult `json:"enqueued"`
	Callbacks []callback      `json:"callbacks"`
	Logs      []logLine       `json:"logs"`
	Exchanges []*exchange     `json:"exchanges"`
	Close     closeResult     `json:"close"`
}

type sdkInfo struct {
	Module        string `json:"module"`
	ModuleVersion string `json:"moduleVersion"`
	// analytics.Version: what the SDK puts in context.library.version and User-Agent.
	Version string `json:"version"`
}

type enqueueResult struct {
	Type  string  `json:"type"`
	Error *string `json:"error"`
}

type callback struct {
	Outcome   string  `json:"outcome"` // "success" or "failure"
	Type      string  `json:"type"`
	MessageId string  `json:"messageId"`
	Error     *string `json:"error"`
}

type logLine struct {
	Level string `json:"level"` // "info" (Logger.Logf) or "error" (Logger.Errorf)
	Text  string `json:"text"`
}

type exchange struct {
	Method        string      `json:"method"`
	URL           string      `json:"url"`
	Headers       http.Header `json:"headers"`
	ContentLength int64       `json:"contentLength"`
	// The body as JSON when it is JSON (after gunzip when Content-Encoding is gzip), else as text.
	Body     json.RawMessage `json:"body,omitempty"`
	BodyText *string         `json:"bodyText,omitempty"`
	Response *response       `json:"response"`
	Error    *string         `json:"error"`
}

type response struct {
	Status  int         `json:"status"`
	Headers http.Header `json:"headers"`
	Body    string      `json:"body"`
}

type closeResult struct {
	Error *string `json:"error"`
	Ms    int64   `json:"ms"`
}

// recorder is the SDK's Callback and Logger, and the Transport's notebook.
type recorder struct {
	mu  sync.Mutex
	rep report
}

func errText(err error) *string {
	if err == nil {
		return nil
	}
	s := err.Error()
	return &s
}

// describe names a message by its call type and the messageId it carries.
func describe(m analytics.Message) (typ string, messageId string) {
	switch v := m.(type) {
	case analytics.Identify:
		return "identify", v.MessageId
	case analytics.Track:
		return "track", v.MessageId
	case analytics.Page:
		return "page", v.MessageId
	case analytics.Screen:
		return "screen", v.MessageId
	case analytics.Group:
		return "group", v.MessageId
	case analytics.Alias:
		return "alias", v.MessageId
	}
	return fmt.Sprintf("%T", m), ""
}

func (r *recorder) Success(m analytics.Message) {
	typ, id := describe(m)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Callbacks = append(r.rep.Callbacks, callback{Outcome: "success", Type: typ, MessageId: id})
}

func (r *recorder) Failure(m analytics.Message, err error) {
	typ, id := describe(m)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Callbacks = append(r.rep.Callbacks, callback{Outcome: "failure", Type: typ, MessageId: id, Error: errText(err)})
}

func (r *recorder) log(level, format string, args ...interface{}) {
	text := fmt.Sprintf(format, args...)
	fmt.Fprintf(os.Stderr, "analytics-go %s: %s\n", level, text)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Logs = append(r.rep.Logs, logLine{Level: level, Text: text})
}

func (r *recorder) Logf(format string, args ...interface{})   { r.log("info", format, args...) }
func (r *recorder) Errorf(format string, args ...interface{}) { r.log("error", format, args...) }

type recordingTransport struct {
	next http.RoundTripper
	rec  *recorder
}

func (t recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ex := &exchange{Method: req.Method, URL: req.URL.String(), Headers: req.Header.Clone(), ContentLength: req.ContentLength}
	if req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			raw, _ := io.ReadAll(body)
			body.Close()
			if req.Header.Get("Content-Encoding") == "gzip" {
				if zr, err := gzip.NewReader(bytes.NewReader(raw)); err == nil {
					if plain, err := io.ReadAll(zr); err == nil {
						raw = plain
					}
				}
			}
			if json.Valid(raw) {
				ex.Body = json.RawMessage(raw)
			} else {
				text := string(raw)
				ex.BodyText = &text
			}
		}
	}
	t.rec.mu.Lock()
	t.rec.rep.Exchanges = append(t.rec.rep.Exchanges, ex)
	t.rec.mu.Unlock()

	res, err := t.next.RoundTrip(req)
	t.rec.mu.Lock()
	defer t.rec.mu.Unlock()
	if err != nil {
		ex.Error = errText(err)
		return res, err
	}
	body, readErr := io.ReadAll(res.Body)
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(body))
	ex.Response = &response{Status: res.StatusCode, Headers: res.Header.Clone(), Body: string(body)}
	if readErr != nil {
		ex.Error = errText(readErr)
	}
	return res, nil
}

// message builds the SDK struct a caller would write for one call.
func (c call) message() (analytics.Message, error) {
	var ts time.Time
	if c.Timestamp != "" {
		var err error
		if ts, err = time.Parse(time.RFC3339Nano, c.Timestamp); err != nil {
			return nil, fmt.Errorf("timestamp: %w", err)
		}
	}
	ctx := c.Context
	if c.ContextExtra != nil {
		if ctx == nil {
			ctx = &analytics.Context{}
		}
		ctx.Extra = c.ContextExtra
	}
	props := analytics.Properties(c.Properties)
	traits := analytics.Traits(c.Traits)
	integrations := analytics.Integrations(c.Integrations)
	switch c.Type {
	case "identify":
		return analytics.Identify{MessageId: c.MessageId, UserId: c.UserId, AnonymousId: c.AnonymousId, Timestamp: ts, Context: ctx, Traits: traits, Integrations: integrations}, nil
	case "track":
		return analytics.Track{MessageId: c.MessageId, UserId: c.UserId, AnonymousId: c.AnonymousId, Event: c.Event, Timestamp: ts, Context: ctx, Properties: props, Integrations: integrations}, nil
	case "page":
		return analytics.Page{MessageId: c.MessageId, UserId: c.UserId, AnonymousId: c.AnonymousId, Name: c.Name, Timestamp: ts, Context: ctx, Properties: props, Integrations: integrations}, nil
	case "screen":
		return analytics.Screen{MessageId: c.MessageId, UserId: c.UserId, AnonymousId: c.AnonymousId, Name: c.Name, Timestamp: ts, Context: ctx, Properties: props, Integrations: integrations}, nil
	case "group":
		return analytics.Group{MessageId: c.MessageId, UserId: c.UserId, AnonymousId: c.AnonymousId, GroupId: c.GroupId, Timestamp: ts, Context: ctx, Traits: traits, Integrations: integrations}, nil
	case "alias":
		return analytics.Alias{MessageId: c.MessageId, UserId: c.UserId, PreviousId: c.PreviousId, Timestamp: ts, Context: ctx, Integrations: integrations}, nil
	}
	return nil, fmt.Errorf("unknown call type %q", c.Type)
}

func readInstructions() (instructions, []analytics.Message, error) {
	var in instructions
	var src io.Reader = os.Stdin
	if len(os.Args) > 1 {
		src = bytes.NewReader([]byte(os.Args[1]))
	}
	dec := json.NewDecoder(src)
	dec.UseNumber() // numbers in properties and traits are sent as written
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, nil, fmt.Errorf("instructions: %w", err)
	}
	if in.Endpoint == "" {
		return in, nil, fmt.Errorf("instructions: endpoint is required")
	}
	msgs := make([]analytics.Message, 0, len(in.Calls))
	for i, c := range in.Calls {
		m, err := c.message()
		if err != nil {
			return in, nil, fmt.Errorf("instructions: call %d: %w", i, err)
		}
		msgs = append(msgs, m)
	}
	return in, msgs, nil
}

func moduleVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == sdkModule {
				return dep.Version
			}
		}
	}
	return "unknown"
}

func main() {
	in, msgs, err := readInstructions()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}

	rec := &recorder{}
	rec.rep.SDK = sdkInfo{Module: sdkModule, ModuleVersion: moduleVersion(), Version: analytics.Version}
	rec.rep.Enqueued = []enqueueResult{}
	rec.rep.Callbacks = []callback{}
	rec.rep.Logs = []logLine{}
	rec.rep.Exchanges = []*exchange{}

	client, err := analytics.NewWithConfig(in.WriteKey, analytics.Config{
		Endpoint:       in.Endpoint,
		Interval:       time.Duration(in.IntervalMs) * time.Millisecond,
		BatchSize:      in.BatchSize,
		DefaultContext: in.DefaultContext,
		Callback:       rec,
		Logger:         rec,
		Transport:      recordingTransport{next: http.DefaultTransport, rec: rec},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "analytics.NewWithConfig:", err)
		os.Exit(2)
	}

	for _, m := range msgs {
		typ, _ := describe(m)
		rec.rep.Enqueued = append(rec.rep.Enqueued, enqueueResult{Type: typ, Error: errText(client.Enqueue(m))})
	}

	started := time.Now()
	closeErr := client.Close()
	rec.mu.Lock()
	rec.rep.Close = closeResult{Error: errText(closeErr), Ms: time.Since(started).Milliseconds()}
	out, err := json.MarshalIndent(rec.rep, "", "  ")
	rec.mu.Unlock()
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	os.Stdout.Write(append(out, '\n'))
}
