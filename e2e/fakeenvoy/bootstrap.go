package fakeenvoy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"
)

// Bootstrap is what the fake takes from an Envoy bootstrap config (-c and
// --config-yaml): the admin address and the static listeners, with their
// routes resolved against the static clusters. The rest of the config is
// read and checked as Envoy reads it, and then ignored, as the fake has no
// use for it.
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

// ParseBootstrap reads the bootstrap as Envoy does: from a config file's
// bytes (JSON when its name ends in .json, YAML otherwise) and a
// --config-yaml string, either of which may be empty, each into Envoy's own
// bootstrap v3 message, the second merged into the first (protobuf's
// MergeFrom: fields set in it win, lists are appended). A config Envoy would
// reject (an unknown field, a typed_config of a type it does not know, a
// value out of its rules) is an error here too.
func ParseBootstrap(file []byte, isJSON bool, configYAML string) (Bootstrap, error) {
	b := &bootstrapv3.Bootstrap{}
	if len(file) > 0 {
		if err := unmarshalConfig(file, isJSON, b); err != nil {
			return Bootstrap{}, err
		}
	}
	if strings.TrimSpace(configYAML) != "" {
		more := &bootstrapv3.Bootstrap{}
		if err := unmarshalConfig([]byte(configYAML), false, more); err != nil {
			return Bootstrap{}, fmt.Errorf("--config-yaml: %w", err)
		}
		proto.Merge(b, more)
	}
	if err := validate(b); err != nil {
		return Bootstrap{}, fmt.Errorf("bootstrap: %w", err)
	}
	return resolve(b)
}

// unmarshalConfig is Envoy's loadFromJson and loadFromYaml: YAML becomes
// JSON, and JSON is read as the proto's JSON mapping, every field known.
func unmarshalConfig(src []byte, isJSON bool, m proto.Message) error {
	if !isJSON {
		j, err := yaml.YAMLToJSON(src)
		if err != nil {
			return fmt.Errorf("Unable to convert YAML as JSON: %v", err)
		}
		src = j
	}
	if err := protojson.Unmarshal(src, m); err != nil {
		return fmt.Errorf("Unable to parse JSON as proto (%v)", err)
	}
	return nil
}

// validate checks m and every typed_config in it against their
// protoc-gen-validate rules, as Envoy does for the bootstrap and for each
// extension it configures.
func validate(m proto.Message) error {
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return err
		}
	}
	var err error
	eachAny(m.ProtoReflect(), func(a *anypb.Any) bool {
		var inner proto.Message
		if inner, err = a.UnmarshalNew(); err == nil {
			err = validate(inner)
		}
		if err != nil {
			err = fmt.Errorf("%s: %w", a.GetTypeUrl(), err)
		}
		return err == nil
	})
	return err
}

// eachAny calls f with every Any in m outside other Anys, until f returns
// false.
func eachAny(m protoreflect.Message, f func(*anypb.Any) bool) bool {
	if a, ok := m.Interface().(*anypb.Any); ok {
		return f(a)
	}
	more := true
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil:
		case fd.IsList():
			for i := 0; more && i < v.List().Len(); i++ {
				more = eachAny(v.List().Get(i).Message(), f)
			}
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					more = eachAny(mv.Message(), f)
					return more
				})
			}
		default:
			more = eachAny(v.Message(), f)
		}
		return more
	})
	return more
}

// hostPort is a socket address as "IP:port".
func hostPort(a *corev3.Address) (string, error) {
	sa := a.GetSocketAddress()
	if sa == nil {
		return "", errors.New("want a socket_address")
	}
	ip, err := netip.ParseAddr(sa.GetAddress())
	if err != nil {
		return "", fmt.Errorf("address %q: want an IP", sa.GetAddress())
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(sa.GetPortValue()))), nil
}

func resolve(b *bootstrapv3.Bootstrap) (Bootstrap, error) {
	var out Bootstrap
	if a := b.GetAdmin().GetAddress(); a != nil {
		switch {
		case a.GetPipe() != nil:
			out.AdminPipe = a.GetPipe().GetPath()
		default:
			addr, err := hostPort(a)
			if err != nil {
				return out, fmt.Errorf("admin.address: %w", err)
			}
			out.AdminAddr = addr
		}
	}
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		if clusters[c.GetName()] != nil {
			return out, fmt.Errorf("cluster manager: duplicate cluster '%s' found", c.GetName())
		}
		clusters[c.GetName()] = c
	}
	names := map[string]bool{}
	for i, ld := range b.GetStaticResources().GetListeners() {
		name := ld.GetName()
		if name == "" {
			name = fmt.Sprintf("#%d", i)
		} else if names[name] {
			return out, fmt.Errorf("listener %s: a listener of that name already exists", name)
		}
		names[name] = true
		if ld.GetAddress().GetSocketAddress() == nil {
			continue // an internal or API listener: nothing to bind
		}
		l, err := listener(ld, clusters)
		if err != nil {
			return out, fmt.Errorf("listener %s: %w", name, err)
		}
		out.Listeners = append(out.Listeners, l)
	}
	return out, nil
}

func listener(ld *listenerv3.Listener, clusters map[string]*clusterv3.Cluster) (Listener, error) {
	addr, err := hostPort(ld.GetAddress())
	if err != nil {
		return Listener{}, fmt.Errorf("address: %w", err)
	}
	l := Listener{Name: ld.GetName(), Addr: addr, Inbound: ld.GetTrafficDirection() == corev3.TrafficDirection_INBOUND}
	if len(ld.GetFilterChains()) == 0 {
		return Listener{}, errors.New("no filter chains")
	}
	// The first chain's last filter is the terminal one: the fake matches
	// no chains.
	fs := ld.GetFilterChains()[0].GetFilters()
	if len(fs) == 0 {
		return Listener{}, errors.New("no filters")
	}
	f := fs[len(fs)-1]
	// Envoy finds a filter's factory by its typed_config's type, not its
	// name.
	if f.GetTypedConfig() == nil {
		return Listener{}, fmt.Errorf("filter %s: no typed_config", f.GetName())
	}
	cfg, err := f.GetTypedConfig().UnmarshalNew()
	if err != nil {
		return Listener{}, fmt.Errorf("filter %s: %w", f.GetName(), err)
	}
	switch nf := cfg.(type) {
	case *tcpproxyv3.TcpProxy:
		l.TCP = true
		l.StatPrefix = nf.GetStatPrefix()
		l.CheckDrainClose = nf.GetCheckDrainClose().GetValue()
		l.Upstream = endpoint(clusters[nf.GetCluster()])
		if l.Upstream == "" {
			l.Upstream = unreachable
		}
	case *hcmv3.HttpConnectionManager:
		for _, hf := range nf.GetHttpFilters() {
			if hf.GetTypedConfig() == nil && hf.GetConfigDiscovery() == nil {
				return Listener{}, fmt.Errorf("filter %s: http filter %s: no typed_config", f.GetName(), hf.GetName())
			}
		}
		l.StatPrefix = nf.GetStatPrefix()
		l.DrainTimeout = nf.GetDrainTimeout().AsDuration()
		if l.Routes, err = routes(nf.GetRouteConfig(), clusters); err != nil {
			return Listener{}, fmt.Errorf("filter %s: %w", f.GetName(), err)
		}
	default:
		return Listener{}, fmt.Errorf("filter %s (%s): the fake runs only http_connection_manager and tcp_proxy", f.GetName(), f.GetTypedConfig().GetTypeUrl())
	}
	return l, nil
}

// routes is an inline route table's routes, in order; those the fake cannot
// follow (another matcher or action) are left out and so never match.
func routes(rc *routev3.RouteConfiguration, clusters map[string]*clusterv3.Cluster) ([]Route, error) {
	out := []Route{}
	// An inline table's clusters are checked at load unless it says not to.
	check := rc.GetValidateClusters() == nil || rc.GetValidateClusters().GetValue()
	for _, vh := range rc.GetVirtualHosts() {
		for _, rd := range vh.GetRoutes() {
			var r Route
			switch m := rd.GetMatch().GetPathSpecifier().(type) {
			case *routev3.RouteMatch_Path:
				r.Path = m.Path
			case *routev3.RouteMatch_Prefix:
				r.Prefix = m.Prefix
			default:
				continue
			}
			switch {
			case rd.GetRoute() != nil:
				name := rd.GetRoute().GetCluster()
				c, ok := clusters[name]
				if !ok && name != "" && check {
					return nil, fmt.Errorf("route_config: unknown cluster '%s' (validate_clusters is true for an inline route table unless set false)", name)
				}
				r.Cluster, r.Upstream, r.H2 = name, endpoint(c), h2(c)
			case rd.GetDirectResponse() != nil:
				r.Status, r.Body = int(rd.GetDirectResponse().GetStatus()), rd.GetDirectResponse().GetBody().GetInlineString()
			default:
				continue
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// h2 is whether the cluster speaks HTTP/2 (h2c prior knowledge) upstream:
// the deprecated http2_protocol_options, still honoured, or the upstream
// HTTP protocol options' explicit HTTP/2.
func h2(c *clusterv3.Cluster) bool {
	if c.GetHttp2ProtocolOptions() != nil {
		return true
	}
	for _, a := range c.GetTypedExtensionProtocolOptions() {
		var o upstreamhttpv3.HttpProtocolOptions
		if a.UnmarshalTo(&o) == nil && o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil {
			return true
		}
	}
	return false
}

// endpoint is the cluster's first socket endpoint; a fake balances nothing.
func endpoint(c *clusterv3.Cluster) string {
	for _, e := range c.GetLoadAssignment().GetEndpoints() {
		for _, lb := range e.GetLbEndpoints() {
			if a, err := hostPort(lb.GetEndpoint().GetAddress()); err == nil {
				return a
			}
		}
	}
	return ""
}

// unreachable is the upstream of a tcp_proxy whose cluster has no endpoint:
// its connections are closed at once, as Envoy closes them.
const unreachable = "unreachable"
