package fakeenvoy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"time"
)

// The build the fake pretends to be, but for its version (EnvoyVersion).
const (
	envoyRevision     = "0000000000000000000000000000000000000000"
	hotRestartVersion = "11.104"
)

// HotRestartVersion is what --hot-restart-version prints and /hot_restart_version
// answers.
func HotRestartVersion() string { return hotRestartVersion }

// serverInfo is admin.v3.ServerInfo with its fields in proto order, which is the order
// Envoy prints them in.
type serverInfo struct {
	Version            string             `json:"version"`
	State              string             `json:"state"`
	UptimeCurrentEpoch string             `json:"uptime_current_epoch"`
	UptimeAllEpochs    string             `json:"uptime_all_epochs"`
	HotRestartVersion  string             `json:"hot_restart_version"`
	CommandLineOptions commandLineOptions `json:"command_line_options"`
	Node               node               `json:"node"`
}

// commandLineOptions is a sketch of admin.v3.CommandLineOptions: the fields a real
// Envoy prints, with the fake's values where the fake has them.
type commandLineOptions struct {
	BaseID                     string   `json:"base_id"`
	Concurrency                int      `json:"concurrency"`
	ConfigPath                 string   `json:"config_path"`
	ConfigYAML                 string   `json:"config_yaml"`
	AllowUnknownStaticFields   bool     `json:"allow_unknown_static_fields"`
	AdminAddressPath           string   `json:"admin_address_path"`
	LocalAddressIPVersion      string   `json:"local_address_ip_version"`
	LogLevel                   string   `json:"log_level"`
	ComponentLogLevel          string   `json:"component_log_level"`
	LogFormat                  string   `json:"log_format"`
	LogPath                    string   `json:"log_path"`
	ServiceCluster             string   `json:"service_cluster"`
	ServiceNode                string   `json:"service_node"`
	ServiceZone                string   `json:"service_zone"`
	FileFlushInterval          string   `json:"file_flush_interval"`
	DrainTime                  string   `json:"drain_time"`
	ParentShutdownTime         string   `json:"parent_shutdown_time"`
	Mode                       string   `json:"mode"`
	DisableHotRestart          bool     `json:"disable_hot_restart"`
	EnableMutexTracing         bool     `json:"enable_mutex_tracing"`
	RestartEpoch               int      `json:"restart_epoch"`
	CPUSetThreads              bool     `json:"cpuset_threads"`
	RejectUnknownDynamicFields bool     `json:"reject_unknown_dynamic_fields"`
	LogFormatEscaped           bool     `json:"log_format_escaped"`
	DisabledExtensions         []string `json:"disabled_extensions"`
	IgnoreUnknownDynamicFields bool     `json:"ignore_unknown_dynamic_fields"`
	UseDynamicBaseID           bool     `json:"use_dynamic_base_id"`
	BaseIDPath                 string   `json:"base_id_path"`
	DrainStrategy              string   `json:"drain_strategy"`
	EnableFineGrainLogging     bool     `json:"enable_fine_grain_logging"`
	SocketPath                 string   `json:"socket_path"`
	SocketMode                 int      `json:"socket_mode"`
	EnableCoreDump             bool     `json:"enable_core_dump"`
	StatsTag                   []string `json:"stats_tag"`
}

type node struct {
	ID                    string       `json:"id"`
	Cluster               string       `json:"cluster"`
	UserAgentName         string       `json:"user_agent_name"`
	UserAgentBuildVersion buildVersion `json:"user_agent_build_version"`
}

type buildVersion struct {
	Version struct {
		Major int `json:"major_number"`
		Minor int `json:"minor_number"`
		Patch int `json:"patch"`
	} `json:"version"`
	Metadata struct {
		BuildType      string `json:"build.type"`
		RevisionSHA    string `json:"revision.sha"`
		SSLVersion     string `json:"ssl.version"`
		RevisionStatus string `json:"revision.status"`
	} `json:"metadata"`
}

func (e *Envoy) handleServerInfo(w http.ResponseWriter, _ *http.Request) {
	uptime := fmt.Sprintf("%ds", int64(e.uptime().Seconds()))
	strategy := "Gradual"
	if e.opts.DrainStrategy == "immediate" {
		strategy = "Immediate"
	}
	info := serverInfo{
		Version:            e.opts.Version.Build(),
		State:              e.State().String(),
		UptimeCurrentEpoch: uptime,
		UptimeAllEpochs:    uptime,
		HotRestartVersion:  hotRestartVersion,
		CommandLineOptions: commandLineOptions{
			BaseID:                "0",
			Concurrency:           e.opts.Concurrency,
			ConfigPath:            e.opts.ConfigPath,
			LocalAddressIPVersion: "v4",
			LogLevel:              "info",
			LogFormat:             "[%Y-%m-%d %T.%e][%t][%l][%n] [%g:%#] %v",
			FileFlushInterval:     "10s",
			DrainTime:             protoDuration(e.opts.DrainTime),
			ParentShutdownTime:    "900s",
			Mode:                  "Serve",
			DisabledExtensions:    []string{},
			DrainStrategy:         strategy,
			SocketPath:            "@envoy_domain_socket",
			StatsTag:              []string{},
		},
		Node: node{UserAgentName: "envoy"},
	}
	bv := &info.Node.UserAgentBuildVersion
	bv.Version.Major, bv.Version.Minor, bv.Version.Patch = e.opts.Version.numbers()
	bv.Metadata.BuildType = "RELEASE"
	bv.Metadata.RevisionSHA = envoyRevision
	bv.Metadata.SSLVersion = "BoringSSL"
	bv.Metadata.RevisionStatus = "Clean"
	body, err := protoJSON(info)
	if err != nil {
		reply(w, http.StatusInternalServerError, "", err.Error())
		return
	}
	reply(w, http.StatusOK, contentTypeJSON, body)
}

// handleMemory is admin.v3.Memory. Its fields are uint64, which proto JSON writes as
// strings.
func handleMemory(w http.ResponseWriter, _ *http.Request) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	body, err := protoJSON(struct {
		Allocated          string `json:"allocated"`
		HeapSize           string `json:"heap_size"`
		PageheapUnmapped   string `json:"pageheap_unmapped"`
		PageheapFree       string `json:"pageheap_free"`
		TotalThreadCache   string `json:"total_thread_cache"`
		TotalPhysicalBytes string `json:"total_physical_bytes"`
	}{u(ms.HeapAlloc), u(ms.HeapSys), u(ms.HeapReleased), u(ms.HeapIdle - ms.HeapReleased), "0", u(ms.Sys)})
	if err != nil {
		reply(w, http.StatusInternalServerError, "", err.Error())
		return
	}
	reply(w, http.StatusOK, contentTypeJSON, body)
}

// protoJSON prints v the way Envoy's pretty proto JSON does: one-space indent, no HTML
// escaping, no trailing newline.
func protoJSON(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(v); err != nil {
		return "", fmt.Errorf("render JSON: %w", err)
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

// protoDuration is google.protobuf.Duration in JSON: seconds with 0, 3, 6 or 9
// fractional digits.
func protoDuration(d time.Duration) string {
	sec, nanos := int64(d/time.Second), int64(d%time.Second)
	switch {
	case nanos == 0:
		return fmt.Sprintf("%ds", sec)
	case nanos%1e6 == 0:
		return fmt.Sprintf("%d.%03ds", sec, nanos/1e6)
	case nanos%1e3 == 0:
		return fmt.Sprintf("%d.%06ds", sec, nanos/1e3)
	}
	return fmt.Sprintf("%d.%09ds", sec, nanos)
}

func (e *Envoy) uptime() time.Duration { return time.Since(e.started) }
