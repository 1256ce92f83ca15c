// Command goclient drives nomad-driver-ctrexec as Nomad's client does, with the Go
// pieces Nomad uses (go-plugin, hcldec, cty msgpack, grpc-go), and prints one JSON
// line per step on stdout for tests/nomad/test_go_client.py to check.
//
// Usage: goclient PLAN.json (the plan: see test_go_client.py).
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/zclconf/go-cty/cty"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Nomad's handshake (plugins/base: protocol 2, its magic cookie).
var handshake = plugin.HandshakeConfig{
	ProtocolVersion:  2,
	MagicCookieKey:   "NOMAD_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
}

const apiVersion = "v0.1.0"

type plan struct {
	Plugin  string            `json:"plugin"`
	Wire    string            `json:"wire"`
	OutDir  string            `json:"out_dir"`
	AllocID string            `json:"alloc_id"`
	Netns   string            `json:"netns"`
	Env     map[string]string `json:"env"`
	Plugins map[string]source `json:"plugin_configs"`
	Tasks   map[string]source `json:"task_configs"`
	Agent   source            `json:"agent"`
	Away    source            `json:"away"`
	BadPlug []bad             `json:"bad_plugin_configs"`
	BadTask []bad             `json:"bad_task_configs"`
	Run     source            `json:"run"`
	Long    source            `json:"long"`
}

// bad is a config hcldec rejects, and the same fault put straight into a payload.
type bad struct {
	Name  string      `json:"name"`
	HCL   string      `json:"hcl"`
	Base  source      `json:"base"`
	Path  string      `json:"path"`
	Value interface{} `json:"value"`
}

var outMu sync.Mutex

func emit(step string, kv map[string]interface{}) {
	if kv == nil {
		kv = map[string]interface{}{}
	}
	kv["step"] = step
	raw, err := json.Marshal(kv)
	if err != nil {
		panic(err)
	}
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Println(string(raw))
}

func fail(what string, err error) {
	emit("fatal", map[string]interface{}{"what": what, "error": err.Error()})
	plugin.CleanupClients() // no plugin process outlives a failed run
	os.Exit(1)
}

// driverPlugin hands back the raw connection: every call goes through call().
type driverPlugin struct{ plugin.NetRPCUnsupportedPlugin }

func (driverPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error { return nil }
func (driverPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (interface{}, error) {
	return c, nil
}

// instance is one plugin process as Nomad's loader or instance manager holds it.
type instance struct {
	n      int
	client *plugin.Client
	conn   *grpc.ClientConn
}

func connect(n int, cfg *plugin.ClientConfig, p *plan) *instance {
	cfg.HandshakeConfig = handshake
	cfg.Plugins = map[string]plugin.Plugin{"driver": driverPlugin{}}
	cfg.AllowedProtocols = []plugin.Protocol{plugin.ProtocolGRPC}
	cfg.Managed = true
	stderr, err := os.Create(filepath.Join(p.OutDir, fmt.Sprintf("stderr-%d.log", n)))
	if err != nil {
		fail("stderr file", err)
	}
	cfg.Stderr = stderr
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "client", Output: stderr, Level: hclog.Trace, JSONFormat: true})
	c := plugin.NewClient(cfg)
	rpc, err := c.Client()
	if err != nil {
		fail(fmt.Sprintf("instance %d: connect", n), err)
	}
	raw, err := rpc.Dispense("driver")
	if err != nil {
		fail("dispense", err)
	}
	rc := c.ReattachConfig()
	emit("connected", map[string]interface{}{
		"instance": n, "protocol": string(c.Protocol()), "version": c.NegotiatedVersion(),
		"network": rc.Addr.Network(), "addr": rc.Addr.String(), "pid": rc.Pid, "reattach": cfg.Reattach != nil,
	})
	return &instance{n: n, client: c, conn: raw.(*grpc.ClientConn)}
}

func launch(n int, p *plan) *instance {
	return connect(n, &plugin.ClientConfig{Cmd: exec.Command(p.Plugin)}, p)
}

// rpc is one unary call; it is printed with its outcome, the error as go-plugin's
// caller sees it (gRPC code, message, and the RecoverableError detail if any).
func (in *instance) rpc(svc, method, req, resp string, body map[string]interface{}) (map[string]interface{}, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := call(ctx, in.conn, svc, method, req, resp, body)
	ev := map[string]interface{}{"instance": in.n, "method": method}
	if err != nil {
		st := status.Convert(err)
		ev["code"] = st.Code().String()
		ev["error"] = st.Message()
		for _, d := range st.Proto().GetDetails() {
			det := map[string]interface{}{"type_url": d.GetTypeUrl()}
			name := d.GetTypeUrl()[strings.LastIndex(d.GetTypeUrl(), "/")+1:]
			if m, e := newMessage(name); e == nil && proto.Unmarshal(d.GetValue(), m) == nil {
				det["value"] = toMap(m)
			}
			ev["details"] = append(asSlice(ev["details"]), det)
		}
		emit("rpc", ev)
		return nil, err
	}
	m := toMap(out)
	emit("rpc", ev)
	return m, nil
}

func asSlice(v interface{}) []interface{} {
	s, _ := v.([]interface{})
	return s
}

func (in *instance) base(method string, body map[string]interface{}) (map[string]interface{}, error) {
	return in.rpc(baseSvc, method, method+"Request", method+"Response", body)
}

func (in *instance) driver(method string, body map[string]interface{}) (map[string]interface{}, error) {
	return in.rpc(driverSvc, method, method+"Request", method+"Response", body)
}

func must(m map[string]interface{}, err error) map[string]interface{} {
	if err != nil {
		fail("rpc", err)
	}
	return m
}

func schema(in *instance, method, what string) hcldec.Spec {
	var resp map[string]interface{}
	if method == "ConfigSchema" {
		resp = must(in.base(method, nil))
	} else {
		resp = must(in.driver(method, nil))
	}
	s := seen{}
	spec, err := convertSpec(asMap(resp["spec"]), "", s)
	if err != nil {
		fail(what+" schema", err)
	}
	emit("schema", map[string]interface{}{"which": what, "seen": seenList(s)})
	return spec
}

// encodeAll decodes each config from HCL and through Nomad's JSON path, and prints
// cty's msgpack of each (the test compares them).
func encodeAll(which string, spec hcldec.Spec, configs map[string]source, vars map[string]cty.Value) map[string][]byte {
	out := map[string][]byte{}
	for name, src := range configs {
		for _, form := range []string{"hcl", "json"} {
			one := source{HCL: src.HCL}
			if form == "json" {
				one = source{JSON: src.JSON}
			}
			val, diags := decode(spec, one, vars)
			if diags.HasErrors() {
				emit("encoded", map[string]interface{}{"which": which, "name": name, "form": form, "diags": diagList(diags)})
				continue
			}
			b, err := encode(val)
			if err != nil {
				fail("msgpack", err)
			}
			emit("encoded", map[string]interface{}{
				"which": which, "name": name, "form": form, "msgpack": base64.StdEncoding.EncodeToString(b),
			})
			out[name+"/"+form] = b
		}
	}
	return out
}

// badPayload prints hcldec's verdict on the HCL, and returns the same fault as the
// msgpack hcldec would never produce, for the plugin's own checks.
func badPayload(spec hcldec.Spec, b bad, vars map[string]cty.Value) []byte {
	_, diags := decode(spec, source{HCL: b.HCL}, vars)
	emit("hcldec_rejects", map[string]interface{}{"name": b.Name, "diags": diagList(diags)})
	base, diags := decode(spec, b.Base, vars)
	if diags.HasErrors() {
		fail("bad base", diags)
	}
	val, err := override(base, strings.Split(b.Path, "."), b.Value)
	if err != nil {
		fail("override", err)
	}
	raw, err := encode(val)
	if err != nil {
		fail("msgpack", err)
	}
	return raw
}

func mustEncode(spec hcldec.Spec, src source, vars map[string]cty.Value) []byte {
	val, diags := decode(spec, src, vars)
	if diags.HasErrors() {
		fail("decode", diags)
	}
	b, err := encode(val)
	if err != nil {
		fail("msgpack", err)
	}
	return b
}

// logs is a task's stdout as the log collector reads it: a fifo under alloc/logs.
type logs struct {
	mu  sync.Mutex
	buf []byte
}

func (l *logs) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}

func fifo(path string) *logs {
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		fail("mkfifo", err)
	}
	l := &logs{}
	f, err := os.OpenFile(path, os.O_RDWR, 0) // never EOF: the reader outlives plugin restarts
	if err != nil {
		fail("open fifo", err)
	}
	go func() {
		chunk := make([]byte, 4096)
		for {
			n, err := f.Read(chunk)
			l.mu.Lock()
			l.buf = append(l.buf, chunk[:n]...)
			l.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return l
}

func taskConfig(p *plan, name string, cfg []byte) (map[string]interface{}, *logs) {
	allocDir := filepath.Join(p.OutDir, "allocs", p.AllocID)
	for _, sub := range []string{"alloc/data", "alloc/logs", "alloc/tmp", name + "/local", name + "/secrets", name + "/tmp"} {
		if err := os.MkdirAll(filepath.Join(allocDir, sub), 0o755); err != nil {
			fail("alloc dir", err)
		}
	}
	stdout := filepath.Join(allocDir, "alloc/logs", "."+name+".stdout.fifo")
	stderr := filepath.Join(allocDir, "alloc/logs", "."+name+".stderr.fifo")
	out := fifo(stdout)
	fifo(stderr)
	env := map[string]string{"NOMAD_TASK_NAME": name, "NOMAD_ALLOC_ID": p.AllocID}
	for k, v := range p.Env {
		env[k] = v
	}
	return map[string]interface{}{
		"id": fmt.Sprintf("%s/%s/%d", p.AllocID, name, time.Now().UnixNano()), "name": name,
		"msgpack_driver_config": base64.StdEncoding.EncodeToString(cfg),
		"env":                   env, "alloc_dir": allocDir, "stdout_path": stdout, "stderr_path": stderr,
		"task_group_name": "web", "job_name": "example", "job_id": "example", "namespace": "default",
		"alloc_id": p.AllocID,
		"resources": map[string]interface{}{
			"allocated_resources": map[string]interface{}{
				"cpu": map[string]interface{}{"cpu_shares": 100}, "memory": map[string]interface{}{"memory_mb": 64},
			},
			"linux_resources": map[string]interface{}{"cpu_shares": 100, "memory_limit_bytes": 64 << 20},
		},
		"network_isolation_spec": map[string]interface{}{"mode": "GROUP", "path": p.Netns},
	}, out
}

// fingerprint opens the stream the instance manager keeps open, and reads its first answer.
func fingerprint(in *instance) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	st, err := openStream(ctx, in.conn, driverSvc, "Fingerprint", "FingerprintRequest", nil)
	if err != nil {
		fail("fingerprint", err)
	}
	resp, _ := newMessage("hashicorp.nomad.plugins.drivers.proto.FingerprintResponse")
	if err := st.RecvMsg(resp); err != nil {
		fail("fingerprint recv", err)
	}
	m := toMap(resp)
	emit("fingerprint", map[string]interface{}{"instance": in.n, "health": m["health"], "attributes": len(asMap(m["attributes"]))})
	return cancel
}

func waitTask(in *instance, id string) map[string]interface{} {
	return must(in.driver("WaitTask", map[string]interface{}{"task_id": id}))
}

func main() {
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail("plan", err)
	}
	var p plan
	if err := json.Unmarshal(raw, &p); err != nil {
		fail("plan", err)
	}
	if err := loadWire(p.Wire); err != nil {
		fail("wire facts", err)
	}
	vars := map[string]cty.Value{}
	for k, v := range p.Env {
		vars[k] = cty.StringVal(v)
	}

	// 1. Probe (loader fingerprint): PluginInfo, ConfigSchema, Kill.
	probe := launch(1, &p)
	info := must(probe.base("PluginInfo", nil))
	emit("plugin_info", map[string]interface{}{"info": info})
	pluginSpec := schema(probe, "ConfigSchema", "plugin")
	probe.client.Kill()
	emit("killed", map[string]interface{}{"instance": 1, "exited": probe.client.Exited()})

	// 2. Validation: SetConfig twice without a NomadConfig; the bad configs are refused.
	encoded := encodeAll("plugin", pluginSpec, p.Plugins, nil)
	validate := launch(2, &p)
	for _, name := range sortedKeys(p.Plugins) {
		b := encoded[name+"/hcl"]
		for i := 0; i < 2; i++ {
			_, err := validate.base("SetConfig", map[string]interface{}{
				"msgpack_config": base64.StdEncoding.EncodeToString(b), "plugin_api_version": apiVersion,
			})
			emit("set_config", map[string]interface{}{"name": name, "ok": err == nil})
		}
	}
	for _, b := range p.BadPlug {
		payload := badPayload(pluginSpec, b, nil)
		_, err := validate.base("SetConfig", map[string]interface{}{
			"msgpack_config": base64.StdEncoding.EncodeToString(payload), "plugin_api_version": apiVersion,
		})
		emit("plugin_rejects", map[string]interface{}{"name": b.Name, "rejected": err != nil})
	}
	// containerd not there: an error a retry may fix, with its RecoverableError detail.
	_, err = validate.base("SetConfig", map[string]interface{}{
		"msgpack_config":     base64.StdEncoding.EncodeToString(mustEncode(pluginSpec, p.Away, nil)),
		"nomad_config":       map[string]interface{}{"driver": map[string]interface{}{"ClientMinPort": 14000, "ClientMaxPort": 14512}},
		"plugin_api_version": apiVersion,
	})
	if err == nil {
		fail("SetConfig", fmt.Errorf("accepted an address with no containerd"))
	}
	validate.client.Kill()

	// 3. The long-lived instance: SetConfig with a NomadConfig, Init, Fingerprint.
	long := launch(3, &p)
	must(long.base("SetConfig", map[string]interface{}{
		"msgpack_config":     base64.StdEncoding.EncodeToString(mustEncode(pluginSpec, p.Agent, nil)),
		"nomad_config":       map[string]interface{}{"driver": map[string]interface{}{"ClientMinPort": 14000, "ClientMaxPort": 14512}},
		"plugin_api_version": apiVersion,
	}))
	must(long.driver("Init", nil))
	fingerprint(long)
	taskSpec := schema(long, "TaskConfigSchema", "task")
	encodeAll("task", taskSpec, p.Tasks, vars)
	for _, b := range p.BadTask {
		tc, _ := taskConfig(&p, b.Name, badPayload(taskSpec, b, vars))
		emit("starting", map[string]interface{}{"task_id": tc["id"]})
		_, err := long.driver("StartTask", map[string]interface{}{"task": tc})
		emit("plugin_rejects", map[string]interface{}{"name": b.Name, "rejected": err != nil})
	}

	// The task flow: StartTask in the netns, WaitTask, StopTask, DestroyTask.
	tc, out := taskConfig(&p, "run", mustEncode(taskSpec, p.Run, vars))
	emit("starting", map[string]interface{}{"task_id": tc["id"]})
	started := must(long.driver("StartTask", map[string]interface{}{"task": tc}))
	handle := asMap(started["handle"])
	emit("started", map[string]interface{}{"task": "run", "handle_version": handle["version"], "has_config": handle["config"] != nil})
	res := waitTask(long, tc["id"].(string))
	must(long.driver("StopTask", map[string]interface{}{"task_id": tc["id"], "timeout": "5s", "signal": "SIGTERM"}))
	must(long.driver("DestroyTask", map[string]interface{}{"task_id": tc["id"], "force": true}))
	emit("exited", map[string]interface{}{"task": "run", "wait": res, "stdout": out.text()})

	// A long task, then Nomad's agent "crashes": a new client reattaches to the same
	// process (PluginInfo, Init, no SetConfig) and recovers the task from its handle.
	lc, _ := taskConfig(&p, "long", mustEncode(taskSpec, p.Long, vars))
	emit("starting", map[string]interface{}{"task_id": lc["id"]})
	lstarted := must(long.driver("StartTask", map[string]interface{}{"task": lc}))
	lhandle := asMap(lstarted["handle"])
	re := connect(4, &plugin.ClientConfig{Reattach: long.client.ReattachConfig()}, &p)
	must(re.base("PluginInfo", nil))
	must(re.driver("Init", nil))
	must(re.driver("RecoverTask", map[string]interface{}{"task_id": lc["id"], "handle": lhandle}))
	insp := must(re.driver("InspectTask", map[string]interface{}{"task_id": lc["id"]}))
	emit("recovered", map[string]interface{}{"instance": 4, "state": asMap(insp["task"])["state"]})

	// The plugin dies; the next dispense starts a new one, which recovers the task too.
	if err := syscall.Kill(long.client.ReattachConfig().Pid, syscall.SIGKILL); err != nil {
		fail("sigkill", err)
	}
	for deadline := time.Now().Add(60 * time.Second); !long.client.Exited(); {
		if time.Now().After(deadline) {
			fail("sigkill", fmt.Errorf("the plugin still runs a minute after SIGKILL"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	emit("plugin_killed", map[string]interface{}{"instance": 3})
	fresh := launch(5, &p)
	must(fresh.base("SetConfig", map[string]interface{}{
		"msgpack_config":     base64.StdEncoding.EncodeToString(mustEncode(pluginSpec, p.Agent, nil)),
		"nomad_config":       map[string]interface{}{"driver": map[string]interface{}{"ClientMinPort": 14000, "ClientMaxPort": 14512}},
		"plugin_api_version": apiVersion,
	}))
	must(fresh.driver("Init", nil))
	must(fresh.driver("RecoverTask", map[string]interface{}{"task_id": lc["id"], "handle": lhandle}))
	insp = must(fresh.driver("InspectTask", map[string]interface{}{"task_id": lc["id"]}))
	emit("recovered", map[string]interface{}{"instance": 5, "state": asMap(insp["task"])["state"]})
	must(fresh.driver("StopTask", map[string]interface{}{"task_id": lc["id"], "timeout": "5s", "signal": "SIGTERM"}))
	lres := waitTask(fresh, lc["id"].(string))
	must(fresh.driver("DestroyTask", map[string]interface{}{"task_id": lc["id"], "force": true}))
	emit("exited", map[string]interface{}{"task": "long", "wait": lres})

	// Shutdown with a stream open: Kill() while the Fingerprint stream runs.
	fingerprint(fresh)
	fresh.client.Kill()
	emit("killed", map[string]interface{}{"instance": 5, "exited": fresh.client.Exited()})
	emit("done", nil)
}
