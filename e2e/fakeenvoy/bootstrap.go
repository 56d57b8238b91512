package fakeenvoy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Bootstrap is what the fake takes from an Envoy bootstrap config (-c and
// --config-yaml): the admin address and the static listeners, with their
// routes resolved against the static clusters. Everything else in the config
// is accepted and ignored, as the fake has no use for it.
type Bootstrap struct {
	// AdminAddr is admin.address.socket_address as "IP:port"; AdminPipe is
	// admin.address.pipe.path. At most one is set; neither when the config
	// has no admin.
	AdminAddr string
	AdminPipe string
	Listeners []Listener
}

// Route is one route of an HTTP listener's route table: a request whose path
// matches goes to an upstream or gets a direct response.
type Route struct {
	Path   string // exact match.path; else Prefix
	Prefix string // match.prefix ("/" matches everything)

	Cluster  string // route.cluster
	Upstream string // the cluster's first endpoint, "IP:port"; "" if it has none
	H2       bool   // the cluster speaks HTTP/2 (h2c prior knowledge) upstream

	Status int    // direct_response.status, when there is no cluster
	Body   string // direct_response.body.inline_string
}

func (r Route) matches(path string) bool {
	if r.Path != "" {
		return path == r.Path
	}
	return strings.HasPrefix(path, r.Prefix)
}

// ParseBootstrap reads the bootstrap from a config file's bytes (JSON when
// its name ends in .json, as Envoy decides; YAML otherwise) and a
// --config-yaml string, either of which may be empty; the second is merged
// into the first the way Envoy merges them (maps field by field, lists
// appended).
func ParseBootstrap(file []byte, isJSON bool, yaml string) (Bootstrap, error) {
	var doc any = map[string]any{}
	if len(file) > 0 {
		v, err := decodeConfig(string(file), isJSON)
		if err != nil {
			return Bootstrap{}, err
		}
		doc = v
	}
	if strings.TrimSpace(yaml) != "" {
		v, err := parseYAML(yaml)
		if err != nil {
			return Bootstrap{}, fmt.Errorf("--config-yaml: %w", err)
		}
		doc = mergeConfig(doc, v)
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return Bootstrap{}, err
	}
	var b bootstrapDoc
	if err := json.Unmarshal(raw, &b); err != nil {
		return Bootstrap{}, fmt.Errorf("bootstrap: %w", err)
	}
	return b.resolve()
}

func decodeConfig(s string, isJSON bool) (any, error) {
	if isJSON {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			return nil, fmt.Errorf("Unable to parse JSON as proto (%v)", err)
		}
		return v, nil
	}
	return parseYAML(s)
}

// mergeConfig is protobuf's MergeFrom on decoded JSON.
func mergeConfig(dst, src any) any {
	dm, ok1 := dst.(map[string]any)
	sm, ok2 := src.(map[string]any)
	if ok1 && ok2 {
		for k, v := range sm {
			dm[k] = mergeConfig(dm[k], v)
		}
		return dm
	}
	dl, ok1 := dst.([]any)
	sl, ok2 := src.([]any)
	if ok1 && ok2 {
		return append(dl, sl...)
	}
	if src == nil {
		return dst
	}
	return src
}

// The parts of envoy.config.bootstrap.v3.Bootstrap that the fake reads.
type bootstrapDoc struct {
	Admin struct {
		Address *addressDoc `json:"address"`
	} `json:"admin"`
	StaticResources struct {
		Listeners []listenerDoc `json:"listeners"`
		Clusters  []clusterDoc  `json:"clusters"`
	} `json:"static_resources"`
}

type addressDoc struct {
	SocketAddress *struct {
		Address   string   `json:"address"`
		PortValue protoInt `json:"port_value"`
	} `json:"socket_address"`
	Pipe *struct {
		Path string `json:"path"`
	} `json:"pipe"`
}

func (a *addressDoc) hostPort() (string, error) {
	if a == nil || a.SocketAddress == nil {
		return "", errors.New("want a socket_address")
	}
	ip, err := netip.ParseAddr(a.SocketAddress.Address)
	if err != nil {
		return "", fmt.Errorf("address %q: want an IP", a.SocketAddress.Address)
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(a.SocketAddress.PortValue))), nil
}

type listenerDoc struct {
	Name             string     `json:"name"`
	Address          addressDoc `json:"address"`
	TrafficDirection string     `json:"traffic_direction"`
	FilterChains     []struct {
		Filters []filterDoc `json:"filters"`
	} `json:"filter_chains"`
}

type filterDoc struct {
	Name        string          `json:"name"`
	TypedConfig json.RawMessage `json:"typed_config"`
}

// networkFilter is the typed_config of the two network filters the fake
// runs: the HTTP connection manager and tcp_proxy.
type networkFilter struct {
	Type       string `json:"@type"`
	StatPrefix string `json:"stat_prefix"`
	Cluster    string `json:"cluster"` // tcp_proxy
	// tcp_proxy's check_drain_close (google.protobuf.BoolValue, plain true
	// in JSON).
	CheckDrainClose bool `json:"check_drain_close"`
	// The HTTP connection manager's drain_timeout, a proto JSON duration.
	DrainTimeout string `json:"drain_timeout"`
	RouteConfig  struct {
		VirtualHosts []struct {
			Routes []struct {
				Match struct {
					Prefix *string `json:"prefix"`
					Path   *string `json:"path"`
				} `json:"match"`
				Route *struct {
					Cluster string `json:"cluster"`
				} `json:"route"`
				DirectResponse *struct {
					Status protoInt `json:"status"`
					Body   struct {
						InlineString string `json:"inline_string"`
					} `json:"body"`
				} `json:"direct_response"`
			} `json:"routes"`
		} `json:"virtual_hosts"`
	} `json:"route_config"`
}

type clusterDoc struct {
	Name           string `json:"name"`
	LoadAssignment struct {
		Endpoints []struct {
			LbEndpoints []struct {
				Endpoint struct {
					Address addressDoc `json:"address"`
				} `json:"endpoint"`
			} `json:"lb_endpoints"`
		} `json:"endpoints"`
	} `json:"load_assignment"`
	// Deprecated v3 field, still honoured by Envoy.
	HTTP2ProtocolOptions       *json.RawMessage `json:"http2_protocol_options"`
	TypedExtensionProtocolOpts map[string]struct {
		ExplicitHTTPConfig *struct {
			HTTP2ProtocolOptions *json.RawMessage `json:"http2_protocol_options"`
		} `json:"explicit_http_config"`
	} `json:"typed_extension_protocol_options"`
}

func (c clusterDoc) h2() bool {
	if c.HTTP2ProtocolOptions != nil {
		return true
	}
	for _, o := range c.TypedExtensionProtocolOpts {
		if o.ExplicitHTTPConfig != nil && o.ExplicitHTTPConfig.HTTP2ProtocolOptions != nil {
			return true
		}
	}
	return false
}

// endpoint is the cluster's first socket endpoint; a fake balances nothing.
func (c clusterDoc) endpoint() string {
	for _, e := range c.LoadAssignment.Endpoints {
		for _, lb := range e.LbEndpoints {
			if a, err := lb.Endpoint.Address.hostPort(); err == nil {
				return a
			}
		}
	}
	return ""
}

func (b bootstrapDoc) resolve() (Bootstrap, error) {
	var out Bootstrap
	if a := b.Admin.Address; a != nil {
		switch {
		case a.Pipe != nil:
			out.AdminPipe = a.Pipe.Path
		default:
			addr, err := a.hostPort()
			if err != nil {
				return out, fmt.Errorf("admin.address: %w", err)
			}
			out.AdminAddr = addr
		}
	}
	clusters := map[string]clusterDoc{}
	for _, c := range b.StaticResources.Clusters {
		clusters[c.Name] = c
	}
	for i, ld := range b.StaticResources.Listeners {
		if ld.Address.SocketAddress == nil {
			continue // an internal or API listener: nothing to bind
		}
		l, err := ld.listener(clusters)
		if err != nil {
			name := ld.Name
			if name == "" {
				name = fmt.Sprintf("#%d", i)
			}
			return out, fmt.Errorf("listener %s: %w", name, err)
		}
		out.Listeners = append(out.Listeners, l)
	}
	return out, nil
}

func (ld listenerDoc) listener(clusters map[string]clusterDoc) (Listener, error) {
	addr, err := ld.Address.hostPort()
	if err != nil {
		return Listener{}, fmt.Errorf("address: %w", err)
	}
	l := Listener{Name: ld.Name, Addr: addr}
	switch ld.TrafficDirection {
	case "INBOUND":
		l.Inbound = true
	case "", "UNSPECIFIED", "OUTBOUND":
	default:
		return Listener{}, fmt.Errorf("traffic_direction %q: want INBOUND, OUTBOUND or UNSPECIFIED", ld.TrafficDirection)
	}
	if len(ld.FilterChains) == 0 {
		return Listener{}, errors.New("no filter chains")
	}
	// The first chain's last filter is the terminal one: the fake matches
	// no chains.
	fs := ld.FilterChains[0].Filters
	if len(fs) == 0 {
		return Listener{}, errors.New("no filters")
	}
	f := fs[len(fs)-1]
	var nf networkFilter
	if len(f.TypedConfig) > 0 {
		if err := json.Unmarshal(f.TypedConfig, &nf); err != nil {
			return Listener{}, fmt.Errorf("filter %s: %w", f.Name, err)
		}
	}
	switch {
	case f.Name == "envoy.filters.network.tcp_proxy" || strings.HasSuffix(nf.Type, ".TcpProxy"):
		l.TCP = true
		l.StatPrefix = nf.StatPrefix
		l.CheckDrainClose = nf.CheckDrainClose
		l.Upstream = clusters[nf.Cluster].endpoint()
		if l.Upstream == "" {
			l.Upstream = unreachable
		}
	case f.Name == "envoy.filters.network.http_connection_manager" || strings.HasSuffix(nf.Type, ".HttpConnectionManager"):
		l.StatPrefix = nf.StatPrefix
		if nf.DrainTimeout != "" {
			d, err := time.ParseDuration(nf.DrainTimeout)
			if err != nil || d < 0 {
				return Listener{}, fmt.Errorf("drain_timeout %q: want a duration such as 5s", nf.DrainTimeout)
			}
			l.DrainTimeout = d
		}
		l.Routes = []Route{}
		for _, vh := range nf.RouteConfig.VirtualHosts {
			for _, rd := range vh.Routes {
				var r Route
				switch {
				case rd.Match.Path != nil:
					r.Path = *rd.Match.Path
				case rd.Match.Prefix != nil:
					r.Prefix = *rd.Match.Prefix
				default:
					continue // a matcher the fake does not know never matches
				}
				switch {
				case rd.Route != nil:
					c := clusters[rd.Route.Cluster]
					r.Cluster, r.Upstream, r.H2 = rd.Route.Cluster, c.endpoint(), c.h2()
				case rd.DirectResponse != nil:
					r.Status, r.Body = int(rd.DirectResponse.Status), rd.DirectResponse.Body.InlineString
				default:
					continue
				}
				l.Routes = append(l.Routes, r)
			}
		}
	default:
		return Listener{}, fmt.Errorf("filter %q: the fake runs only http_connection_manager and tcp_proxy", f.Name)
	}
	return l, nil
}

// unreachable is the upstream of a tcp_proxy whose cluster has no endpoint:
// its connections are closed at once, as Envoy closes them.
const unreachable = "unreachable"

// protoInt is a proto JSON integer, which may be written as a string.
type protoInt int64

func (p *protoInt) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	n, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("want an integer, got %s", b)
	}
	*p = protoInt(n)
	return nil
}
