package main

// Message types built at run time from the wire facts (tests/data/nomad-wire-2.0.5.json:
// full names, field numbers, types, labels), not from any .proto text: no protoc is
// needed, and the client does not share the plugin's own protos (protos/ctrexec/_api/nomad),
// so a wrong field number on either side shows up as a mismatch.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type wireField struct {
	Label    string `json:"label"`
	Number   int32  `json:"number"`
	Type     string `json:"type"`
	TypeName string `json:"type_name"`
}

type wireFile struct {
	Package  string                                           `json:"package"`
	Enums    map[string]map[string]int32                      `json:"enums"`
	Messages map[string]struct{ Fields map[string]wireField } `json:"messages"`
}

// The Nomad files the client uses, in dependency order.
var nomadFiles = []string{
	"plugins/shared/hclspec/hcl_spec.proto",
	"plugins/shared/structs/proto/attribute.proto",
	"plugins/shared/structs/proto/recoverable_error.proto",
	"plugins/shared/structs/proto/stats.proto",
	"plugins/base/proto/base.proto",
	"plugins/drivers/proto/driver.proto",
}

var wellKnown = map[string]string{
	"google.protobuf.Timestamp":   "google/protobuf/timestamp.proto",
	"google.protobuf.Duration":    "google/protobuf/duration.proto",
	"google.protobuf.Empty":       "google/protobuf/empty.proto",
	"google.protobuf.Any":         "google/protobuf/any.proto",
	"google.protobuf.BoolValue":   "google/protobuf/wrappers.proto",
	"google.protobuf.StringValue": "google/protobuf/wrappers.proto",
	"google.protobuf.Int64Value":  "google/protobuf/wrappers.proto",
	"google.protobuf.DoubleValue": "google/protobuf/wrappers.proto",
}

var files = new(protoregistry.Files)

var protoTypes = map[string]descriptorpb.FieldDescriptorProto_Type{
	"double": descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, "float": descriptorpb.FieldDescriptorProto_TYPE_FLOAT,
	"int64": descriptorpb.FieldDescriptorProto_TYPE_INT64, "uint64": descriptorpb.FieldDescriptorProto_TYPE_UINT64,
	"int32": descriptorpb.FieldDescriptorProto_TYPE_INT32, "uint32": descriptorpb.FieldDescriptorProto_TYPE_UINT32,
	"bool": descriptorpb.FieldDescriptorProto_TYPE_BOOL, "string": descriptorpb.FieldDescriptorProto_TYPE_STRING,
	"bytes": descriptorpb.FieldDescriptorProto_TYPE_BYTES, "message": descriptorpb.FieldDescriptorProto_TYPE_MESSAGE,
	"enum": descriptorpb.FieldDescriptorProto_TYPE_ENUM, "sint64": descriptorpb.FieldDescriptorProto_TYPE_SINT64,
	"sint32": descriptorpb.FieldDescriptorProto_TYPE_SINT32, "fixed64": descriptorpb.FieldDescriptorProto_TYPE_FIXED64,
	"fixed32": descriptorpb.FieldDescriptorProto_TYPE_FIXED32,
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// loadWire registers the Nomad files, described by the wire facts, in files.
func loadWire(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var facts struct{ Files map[string]wireFile }
	if err := json.Unmarshal(raw, &facts); err != nil {
		return err
	}
	for _, fd := range []protoreflect.FileDescriptor{
		timestamppb.File_google_protobuf_timestamp_proto, durationpb.File_google_protobuf_duration_proto,
		emptypb.File_google_protobuf_empty_proto, anypb.File_google_protobuf_any_proto, wrapperspb.File_google_protobuf_wrappers_proto,
	} {
		if err := files.RegisterFile(fd); err != nil {
			return err
		}
	}
	owner := map[string]string{} // full type name -> file
	for name, f := range facts.Files {
		for m := range f.Messages {
			owner[m] = name
		}
		for e := range f.Enums {
			owner[e] = name
		}
	}
	for k, v := range wellKnown {
		owner[k] = v
	}
	for _, name := range nomadFiles {
		f, ok := facts.Files[name]
		if !ok {
			return fmt.Errorf("wire facts have no %s", name)
		}
		fdp, err := buildFile(name, f, owner)
		if err != nil {
			return err
		}
		fd, err := protodesc.NewFile(fdp, files)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := files.RegisterFile(fd); err != nil {
			return err
		}
	}
	return nil
}

func buildFile(name string, f wireFile, owner map[string]string) (*descriptorpb.FileDescriptorProto, error) {
	fdp := &descriptorpb.FileDescriptorProto{
		Name: proto.String(name), Package: proto.String(f.Package), Syntax: proto.String("proto3"),
	}
	deps := map[string]bool{}
	msgs := map[string]*descriptorpb.DescriptorProto{}
	rel := func(full string) string { return strings.TrimPrefix(full, f.Package+".") }
	// parent returns where a nested name lives (nil: the file), creating parents first.
	for _, full := range sortedKeys(f.Messages) { // sorted: "A" before "A.B"
		m := f.Messages[full]
		dp := &descriptorpb.DescriptorProto{Name: proto.String(rel(full)[strings.LastIndex(rel(full), ".")+1:])}
		mapEntry := true
		for _, fname := range sortedKeys(m.Fields) {
			wf := m.Fields[fname]
			typ, ok := protoTypes[wf.Type]
			if !ok {
				return nil, fmt.Errorf("%s.%s: type %q", full, fname, wf.Type)
			}
			label := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
			if wf.Label == "repeated" {
				label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED
			}
			if wf.Label != "" {
				mapEntry = false
			}
			fp := &descriptorpb.FieldDescriptorProto{
				Name: proto.String(fname), Number: proto.Int32(wf.Number), Type: typ.Enum(), Label: label.Enum(),
			}
			if wf.TypeName != "" {
				fp.TypeName = proto.String(wf.TypeName)
				if o := owner[strings.TrimPrefix(wf.TypeName, ".")]; o != "" && o != name {
					deps[o] = true
				}
			}
			dp.Field = append(dp.Field, fp)
		}
		// A map's entry type: key and value with no label (the facts' own marker).
		if mapEntry && len(m.Fields) == 2 && strings.HasSuffix(full, "Entry") {
			dp.Options = &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)}
		}
		msgs[full] = dp
		if i := strings.LastIndex(full, "."); i > len(f.Package) {
			parent, ok := msgs[full[:i]]
			if !ok {
				return nil, fmt.Errorf("%s: no parent message", full)
			}
			parent.NestedType = append(parent.NestedType, dp)
		} else {
			fdp.MessageType = append(fdp.MessageType, dp)
		}
	}
	for _, full := range sortedKeys(f.Enums) {
		ep := &descriptorpb.EnumDescriptorProto{Name: proto.String(full[strings.LastIndex(full, ".")+1:])}
		values := f.Enums[full]
		names := sortedKeys(values)
		sort.SliceStable(names, func(i, j int) bool { return values[names[i]] < values[names[j]] })
		numbers := map[int32]bool{}
		for _, v := range names {
			if numbers[values[v]] { // two names for one number (MountConfigs)
				ep.Options = &descriptorpb.EnumOptions{AllowAlias: proto.Bool(true)}
			}
			numbers[values[v]] = true
			ep.Value = append(ep.Value, &descriptorpb.EnumValueDescriptorProto{Name: proto.String(v), Number: proto.Int32(values[v])})
		}
		if i := strings.LastIndex(full, "."); i > len(f.Package) {
			parent, ok := msgs[full[:i]]
			if !ok {
				return nil, fmt.Errorf("%s: no parent message", full)
			}
			parent.EnumType = append(parent.EnumType, ep)
		} else {
			fdp.EnumType = append(fdp.EnumType, ep)
		}
	}
	for _, d := range sortedKeys(deps) {
		fdp.Dependency = append(fdp.Dependency, d)
	}
	return fdp, nil
}

func newMessage(full string) (*dynamicpb.Message, error) {
	d, err := files.FindDescriptorByName(protoreflect.FullName(full))
	if err != nil {
		return nil, err
	}
	md, ok := d.(protoreflect.MessageDescriptor)
	if !ok {
		return nil, fmt.Errorf("%s is not a message", full)
	}
	return dynamicpb.NewMessage(md), nil
}

// codec marshals with the v2 API: dynamic messages have no generated code for
// grpc's default codec. Only our own calls use it.
type codec struct{}

func (codec) Marshal(v interface{}) ([]byte, error)   { return proto.Marshal(v.(proto.Message)) }
func (codec) Unmarshal(b []byte, v interface{}) error { return proto.Unmarshal(b, v.(proto.Message)) }
func (codec) Name() string                            { return "proto" }

var (
	jsonOut = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false, Resolver: nil}
	jsonIn  = protojson.UnmarshalOptions{}
)

// service full names, as they travel in the gRPC path.
const (
	baseSvc   = "hashicorp.nomad.plugins.base.proto.BasePlugin"
	driverSvc = "hashicorp.nomad.plugins.drivers.proto.Driver"
)

// request builds svc's method's input type from a JSON-like map.
func request(typeName string, body map[string]interface{}) (*dynamicpb.Message, error) {
	req, err := newMessage(typeName)
	if err != nil {
		return nil, err
	}
	if body == nil {
		body = map[string]interface{}{}
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	if err := jsonIn.Unmarshal(raw, req); err != nil {
		return nil, fmt.Errorf("%s from %s: %w", typeName, raw, err)
	}
	return req, nil
}

func toMap(m proto.Message) map[string]interface{} {
	raw, err := jsonOut.Marshal(m)
	if err != nil {
		panic(err)
	}
	out := map[string]interface{}{}
	if err := json.Unmarshal(raw, &out); err != nil {
		panic(err)
	}
	return out
}

// call is one unary RPC: svc's method with a request and a response type of the facts.
func call(ctx context.Context, conn *grpc.ClientConn, svc, method, in, out string, body map[string]interface{}) (*dynamicpb.Message, error) {
	pkg := svc[:strings.LastIndex(svc, ".")]
	req, err := request(pkg+"."+in, body)
	if err != nil {
		return nil, err
	}
	resp, err := newMessage(pkg + "." + out)
	if err != nil {
		return nil, err
	}
	err = conn.Invoke(ctx, "/"+svc+"/"+method, req, resp, grpc.ForceCodec(codec{}))
	return resp, err
}

// openStream opens a server stream and sends its one request.
func openStream(ctx context.Context, conn *grpc.ClientConn, svc, method, in string, body map[string]interface{}) (grpc.ClientStream, error) {
	pkg := svc[:strings.LastIndex(svc, ".")]
	req, err := request(pkg+"."+in, body)
	if err != nil {
		return nil, err
	}
	desc := &grpc.StreamDesc{StreamName: method, ServerStreams: true}
	st, err := conn.NewStream(ctx, desc, "/"+svc+"/"+method, grpc.ForceCodec(codec{}))
	if err != nil {
		return nil, err
	}
	if err := st.SendMsg(req); err != nil {
		return nil, err
	}
	return st, st.CloseSend()
}
