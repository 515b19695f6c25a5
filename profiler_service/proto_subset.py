"""Protobuf messages declared in code: the few fields we read or write of TensorFlow's profiler
protos, with their numbers, so the sidecar needs neither TensorFlow nor generated modules.

    classes = message_classes("profiler_service.xplane", {"XSpace": [("planes", 1, TYPE_MESSAGE,
                              True, "XPlane")], ...})

Fields left out are skipped on parsing (protobuf keeps unknown fields aside), so a subset reads
the full message. Maps are declared as `"Parent.NameEntry"` messages with `map_entry` set.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto
# name -> [(field, number, type, repeated, message type or None)]
Fields = dict[str, list[tuple[str, int, int, bool, str | None]]]
# "Parent.NameEntry" -> (key type, value message)
Maps = dict[str, tuple[int, str]]


def message_classes(package: str, fields: Fields, maps: Maps | None = None) -> dict[str, Any]:
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"{package.replace('.', '/')}.proto", package=package, syntax="proto2"
    )
    messages = {}
    for name, declared in fields.items():
        message = messages[name] = proto.message_type.add(name=name)
        for field, number, kind, repeated, type_name in declared:
            message.field.add(
                name=field,
                number=number,
                type=kind,
                label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL,
                type_name=f".{package}.{type_name}" if type_name else None,
            )
    for entry_name, (key_type, value) in (maps or {}).items():
        parent, entry = entry_name.split(".")
        nested = messages[parent].nested_type.add(name=entry)
        nested.options.map_entry = True
        nested.field.add(name="key", number=1, type=key_type, label=F.LABEL_OPTIONAL)
        nested.field.add(
            name="value",
            number=2,
            type=F.TYPE_MESSAGE,
            label=F.LABEL_OPTIONAL,
            type_name=f".{package}.{value}",
        )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
        for name in fields
    }
