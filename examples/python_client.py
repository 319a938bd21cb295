#!/usr/bin/python3
"""A small Python client of a layerpipe cluster: ClusterStatus, Tokenize, streaming Generate, Score, and a
job that is submitted and then followed with StreamJob.

    python3 examples/python_client.py --coordinator HOST:PORT [--prompt TEXT] [--max-new-tokens N]
        [--tls-ca CA.pem] [--token TOKEN]      # a coordinator with TLS and bearer tokens (docs/security.md)

Needs only grpcio, protobuf and protoc (Debian: python3-grpcio python3-protobuf protobuf-compiler). The
message classes are generated from proto/layerpipe.proto into a temporary directory when the script starts,
and the RPCs are called by their method paths, so no generated gRPC stubs are needed.
"""

import argparse
import importlib
import os
import shutil
import subprocess
import sys
import tempfile

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PROTO = os.path.join(HERE, "..", "proto", "layerpipe.proto")


def load_messages(proto_path):
    """Compiles the .proto with protoc and imports the resulting layerpipe_pb2 module."""
    out_dir = tempfile.mkdtemp(prefix="layerpipe_pb2_")
    proto_dir, proto_file = os.path.split(os.path.abspath(proto_path))
    subprocess.run(["protoc", f"--proto_path={proto_dir}", f"--python_out={out_dir}", proto_file], check=True)
    sys.path.insert(0, out_dir)
    try:
        return importlib.import_module(os.path.splitext(proto_file)[0] + "_pb2")
    finally:
        sys.path.remove(out_dir)
        shutil.rmtree(out_dir, ignore_errors=True)


class LayerPipeClient:
    """The coordinator's LayerPipe service, one callable per RPC."""

    # RPC name -> (streams its response, request message, response message)
    RPCS = {
        "Generate": (True, "GenerateRequest", "GenerateResponse"),
        "Score": (False, "ScoreRequest", "ScoreResponse"),
        "SubmitJob": (False, "SubmitJobRequest", "SubmitJobResponse"),
        "GetJob": (False, "GetJobRequest", "JobInfo"),
        "StreamJob": (True, "StreamJobRequest", "GenerateResponse"),
        "Tokenize": (False, "TokenizeRequest", "TokenizeResponse"),
        "ClusterStatus": (False, "ClusterStatusRequest", "ClusterStatusResponse"),
    }

    def __init__(self, address, pb, tls_ca=None, token=None):
        # Score can return full logits, far above gRPC's default 4 MB receive limit.
        options = [("grpc.max_receive_message_length", -1)]
        if tls_ca:
            with open(tls_ca, "rb") as f:
                credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
            if token:  # sent as "authorization: Bearer TOKEN" on every call
                credentials = grpc.composite_channel_credentials(credentials,
                                                                 grpc.access_token_call_credentials(token))
            self.channel = grpc.secure_channel(address, credentials, options=options)
        else:
            self.channel = grpc.insecure_channel(address, options=options)
        for name, (streaming, request, response) in self.RPCS.items():
            make = self.channel.unary_stream if streaming else self.channel.unary_unary
            setattr(self, name, make(f"/layerpipe.v1.LayerPipe/{name}",
                                     request_serializer=getattr(pb, request).SerializeToString,
                                     response_deserializer=getattr(pb, response).FromString))


def follow(stream):
    """Prints a Generate/StreamJob stream's text as it arrives; returns (ids, the final message)."""
    ids, last = [], None
    for msg in stream:
        sys.stdout.write(msg.text)
        sys.stdout.flush()
        ids.extend(t.id for t in msg.tokens)
        last = msg
    sys.stdout.write("\n")
    return ids, last


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--coordinator", required=True, help="HOST:PORT of the coordinator")
    ap.add_argument("--prompt", default="The capital of France is")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--image", action="append", default=[],
                    help="a PNG or JPEG to attach (repeatable): put one <|image|> in --prompt for each")
    ap.add_argument("--audio", action="append", default=[],
                    help="a WAV to attach (repeatable): put one <|audio|> in --prompt for each")
    ap.add_argument("--proto", default=DEFAULT_PROTO, help="path of layerpipe.proto")
    ap.add_argument("--tls-ca", help="PEM CA of the coordinator's certificate (TLS)")
    ap.add_argument("--token", help="bearer token (needs --tls-ca: gRPC sends tokens only over TLS)")
    args = ap.parse_args()
    if args.token and not args.tls_ca:
        ap.error("--token needs --tls-ca")

    pb = load_messages(args.proto)
    client = LayerPipeClient(args.coordinator, pb, args.tls_ca, args.token)

    status = client.ClusterStatus(pb.ClusterStatusRequest(), timeout=30)
    print(f"cluster: model {status.model}, {status.num_layers} layers, {len(status.stages)} stages, "
          f"ready {status.ready}")
    for s in status.stages:
        print(f"  stage {s.stage}: {s.address} layers [{s.layer_begin}, {s.layer_end}) {s.health}")

    # Files travel as bytes; the coordinator decodes them and expands each placeholder to its soft tokens.
    attachments = []
    for path in args.image:
        with open(path, "rb") as f:
            attachments.append(pb.Attachment(image=f.read()))
    for path in args.audio:
        with open(path, "rb") as f:
            attachments.append(pb.Attachment(audio=f.read()))

    tokens = client.Tokenize(pb.TokenizeRequest(text=args.prompt, add_bos=True, attachments=attachments), timeout=30)
    print("tokenize ids:", ",".join(map(str, tokens.ids)))

    # Greedy (temperature unset = 0), streamed.
    request = pb.GenerateRequest(prompt=args.prompt, max_new_tokens=args.max_new_tokens, attachments=attachments)
    print("generate text: ", end="")
    ids, last = follow(client.Generate(request))
    print("generate ids:", ",".join(map(str, ids)))
    print(f"generate finish: {last.finish_reason}, {last.usage.prompt_tokens} prompt tokens, "
          f"{last.usage.completion_tokens} generated, first token {last.timings.time_to_first_token_ms:.1f} ms, "
          f"total {last.timings.total_ms:.1f} ms")

    # The prompt's runs of image (audio) ids take the attachments again, in order.
    score = client.Score(pb.ScoreRequest(ids=pb.TokenIds(ids=list(tokens.ids) + ids), attachments=attachments),
                         timeout=60)
    print(f"score: {len(score.ids)} ids, total logprob {sum(score.logprobs):.6f}")

    # The same request as a job: it would survive this client's disconnect; here it is followed at once.
    job = client.SubmitJob(pb.SubmitJobRequest(request=request), timeout=30)
    print("job id:", job.job_id)
    print("job text: ", end="")
    job_ids, _ = follow(client.StreamJob(pb.StreamJobRequest(job_id=job.job_id, offset=0)))
    info = client.GetJob(pb.GetJobRequest(job_id=job.job_id), timeout=30)
    print("job ids:", ",".join(map(str, job_ids)))
    print(f"job state: {pb.JobState.Name(info.state)}, {info.generated_tokens} generated")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except grpc.RpcError as e:
        print(f"python_client: {e.code().name}: {e.details()}", file=sys.stderr)
        sys.exit(1)
