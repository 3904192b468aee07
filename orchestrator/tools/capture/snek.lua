-- snek.lua: a Wireshark dissector for SNEK / Pinecone peerings, written for snekbed.
--
-- Decodes, on any TCP port: the 104-byte handshake (PROTOCOL.md 3.2), the 10-byte frame header (4.3),
-- every frame type of the current protocol by the reference code's numbering (0 Keepalive,
-- 1 TreeAnnouncement, 2 Bootstrap, 3 Traffic, 4 WakeupBroadcast), the legacy variant's 0xE0-0xE3 frames
-- (7.4), signed root announcements hop by hop (4.5), bootstrap and wakeup payloads (4.6, 4.7),
-- watermarks (4.8) and the ping payload carried in Traffic (8). TCP reassembly handles a frame split
-- across segments and several frames in one segment. A malformed field is flagged as expert info
-- ("snek.malformed"), never a Lua error.
--
-- Install: `snekbed wireshark install` (copies this file into Wireshark's personal plugin folder and
-- disables the LBMSRS heuristic, which otherwise claims the 104-byte handshake segment first). A snek
-- connection is found on any port by the heuristic below (which runs after port-based dissectors: port 7000,
-- snekbed's default and Gryphon's in Wireshark, is claimed outright).
-- Or, for one run: tshark -X lua_script:snek.lua --disable-heuristic lbmsrs_tcp -r capture.pcapng

local snek = Proto("snek", "SNEK overlay routing (Pinecone)")

local TYPE_NAMES = {
    [0] = "Keepalive", [1] = "TreeAnnouncement", [2] = "Bootstrap", [3] = "Traffic", [4] = "WakeupBroadcast",
    [0xE0] = "LegacyBootstrap", [0xE1] = "LegacyBootstrapACK", [0xE2] = "LegacySetup", [0xE3] = "LegacyTeardown",
}
local HANDSHAKE_LEN = 104
local HEADER_LEN = 10
local HOP_LEN_MIN = 97 -- varu64 port (>= 1 byte) + key 32 + signature 64

local f = {
    hs = ProtoField.none("snek.handshake", "Handshake"),
    hs_version = ProtoField.uint8("snek.handshake.version", "Protocol version"),
    hs_caps = ProtoField.uint32("snek.handshake.caps", "Capabilities", base.HEX),
    hs_cap_root = ProtoField.bool("snek.handshake.caps.lengthened_root_interval", "LengthenedRootInterval", 32, nil, 0x01),
    hs_cap_setups = ProtoField.bool("snek.handshake.caps.cryptographic_setups", "CryptographicSetups", 32, nil, 0x02),
    hs_cap_acks = ProtoField.bool("snek.handshake.caps.setup_acks", "SetupACKs", 32, nil, 0x04),
    hs_cap_coords = ProtoField.bool("snek.handshake.caps.deduped_coordinate_info", "DedupedCoordinateInfo", 32, nil, 0x08),
    hs_cap_soft = ProtoField.bool("snek.handshake.caps.soft_state", "SoftState", 32, nil, 0x10),
    hs_cap_hybrid = ProtoField.bool("snek.handshake.caps.hybrid_routing", "HybridRouting", 32, nil, 0x20),
    hs_cap_legacy = ProtoField.bool("snek.handshake.caps.legacy_snake", "Legacy snake experiment", 32, nil, 0x80000000),
    hs_key = ProtoField.bytes("snek.handshake.key", "Public key"),
    hs_sig = ProtoField.bytes("snek.handshake.signature", "Signature"),

    frame = ProtoField.none("snek.frame", "Frame"),
    magic = ProtoField.string("snek.magic", "Magic"),
    version = ProtoField.uint8("snek.version", "Frame version"),
    ftype = ProtoField.uint8("snek.type", "Frame type", base.HEX, TYPE_NAMES),
    extra = ProtoField.uint8("snek.extra", "Extra"),
    hop_limit = ProtoField.uint8("snek.hop_limit", "Hop limit"),
    len = ProtoField.uint16("snek.len", "Frame length"),
    plen = ProtoField.uint16("snek.plen", "Payload length"),
    dest_coords = ProtoField.string("snek.dest_coords", "Destination coordinates"),
    src_coords = ProtoField.string("snek.src_coords", "Source coordinates"),
    coord_port = ProtoField.uint64("snek.coords.port", "Port"), -- a varu64: ports above 2^32 stay exact
    dest_key = ProtoField.bytes("snek.dest_key", "Destination key"),
    src_key = ProtoField.bytes("snek.src_key", "Source key"),
    wm_key = ProtoField.bytes("snek.watermark.key", "Watermark key"),
    wm_seq = ProtoField.uint64("snek.watermark.seq", "Watermark sequence"),
    payload = ProtoField.bytes("snek.payload", "Payload"),
    body = ProtoField.bytes("snek.body", "Body (unknown type)"),
    continuation = ProtoField.uint32("snek.continuation", "Bytes of a frame that began before the capture"),

    ann_root_key = ProtoField.bytes("snek.ann.root_key", "Root key"),
    ann_root_seq = ProtoField.uint64("snek.ann.root_seq", "Root sequence"),
    ann_hops = ProtoField.uint32("snek.ann.hops", "Signature hops"),
    ann_hop = ProtoField.none("snek.ann.hop", "Hop"),
    ann_hop_port = ProtoField.uint64("snek.ann.hop.port", "Port"),
    ann_hop_key = ProtoField.bytes("snek.ann.hop.key", "Key"),
    ann_hop_sig = ProtoField.bytes("snek.ann.hop.signature", "Signature"),

    bs_seq = ProtoField.uint64("snek.bootstrap.seq", "Sequence (Unix ms)"),
    bs_root_key = ProtoField.bytes("snek.bootstrap.root_key", "Root key"),
    bs_root_seq = ProtoField.uint64("snek.bootstrap.root_seq", "Root sequence"),
    bs_sig = ProtoField.bytes("snek.bootstrap.signature", "Signature"),

    wk_seq = ProtoField.uint64("snek.wakeup.seq", "Sequence (Unix ms)"),
    wk_root_key = ProtoField.bytes("snek.wakeup.root_key", "Root key"),
    wk_root_seq = ProtoField.uint64("snek.wakeup.root_seq", "Root sequence"),
    wk_sig = ProtoField.bytes("snek.wakeup.signature", "Signature"),

    ping = ProtoField.none("snek.ping", "Ping"),
    ping_type = ProtoField.uint8("snek.ping.type", "Ping type", base.DEC, { [0] = "Ping", [1] = "Pong" }),
    ping_hops = ProtoField.uint16("snek.ping.hops", "Hops"),
    ping_origin = ProtoField.bytes("snek.ping.origin", "Origin key"),
    ping_dest = ProtoField.bytes("snek.ping.destination", "Destination key"),

    lg_path_key = ProtoField.bytes("snek.legacy.path_key", "Path key"),
    lg_path_id = ProtoField.bytes("snek.legacy.path_id", "Path ID"),
    lg_root_key = ProtoField.bytes("snek.legacy.root_key", "Root key"),
    lg_root_seq = ProtoField.uint64("snek.legacy.root_seq", "Root sequence"),
    lg_src_sig = ProtoField.bytes("snek.legacy.source_sig", "Source signature"),
    lg_dest_sig = ProtoField.bytes("snek.legacy.destination_sig", "Destination signature"),
}
snek.fields = {}
for _, field in pairs(f) do
    table.insert(snek.fields, field)
end

local e_malformed = ProtoExpert.new("snek.malformed", "Malformed SNEK data", expert.group.MALFORMED, expert.severity.ERROR)
local e_unknown = ProtoExpert.new("snek.unknown_type", "Unknown frame type (a reference node drops it)",
    expert.group.UNDECODED, expert.severity.NOTE)
local e_continuation = ProtoExpert.new("snek.continuation", "Bytes of a frame that began before the capture",
    expert.group.SEQUENCE, expert.severity.NOTE)
snek.experts = { e_malformed, e_unknown, e_continuation }

-- A cursor over one frame body; every read checks the bounds and raises a Lua error caught per frame.
local Reader = {}
Reader.__index = Reader

local function reader(tvb, offset, limit)
    return setmetatable({ tvb = tvb, pos = offset, limit = limit }, Reader)
end

local Short = {}

function Reader:need(n)
    if self.pos + n > self.limit then
        error(Short)
    end
end

function Reader:take(n)
    self:need(n)
    local r = self.tvb(self.pos, n)
    self.pos = self.pos + n
    return r
end

function Reader:u16()
    local r = self:take(2)
    return r:uint(), r
end

-- varu64 (4.1): big-endian base-128, bit 7 set on all but the last byte; at most 10 bytes.
function Reader:varu64()
    local start = self.pos
    local value = UInt64(0)
    for i = 1, 10 do
        self:need(1)
        local b = self.tvb(self.pos, 1):uint()
        self.pos = self.pos + 1
        value = value:lshift(7):bor(UInt64(bit32.band(b, 0x7F)))
        if bit32.band(b, 0x80) == 0 then
            return value, self.tvb(start, self.pos - start)
        end
    end
    error(Short)
end

function Reader:remaining()
    return self.limit - self.pos
end

-- Coordinates (4.2): u16 byte length, then varu64 ports that exactly fill it.
local function add_coords(tree, rd, field)
    local start = rd.pos
    local n = rd:u16()
    rd:need(n)
    local inner = reader(rd.tvb, rd.pos, rd.pos + n)
    local ports = {}
    while inner:remaining() > 0 do
        local v, r = inner:varu64()
        ports[#ports + 1] = { tostring(v), r, v }
    end
    rd.pos = rd.pos + n
    local text = "[" .. table.concat((function()
        local t = {}
        for i, p in ipairs(ports) do
            t[i] = p[1]
        end
        return t
    end)(), " ") .. "]"
    local sub = tree:add(field, rd.tvb(start, rd.pos - start), text)
    for _, p in ipairs(ports) do
        sub:add(f.coord_port, p[2], p[3])
    end
    return text
end

local function add_varu64(tree, rd, field)
    local v, r = rd:varu64()
    tree:add(field, r, v)
    return v
end

-- Root announcement (4.5)
local function add_announcement(tree, tvb, offset, limit)
    local rd = reader(tvb, offset, limit)
    tree:add(f.ann_root_key, rd:take(32))
    local seq = add_varu64(tree, rd, f.ann_root_seq)
    local hops = 0
    while rd:remaining() >= HOP_LEN_MIN do
        local start = rd.pos
        local port, pr = rd:varu64()
        local key = rd:take(32)
        local sig = rd:take(64)
        hops = hops + 1
        local h = tree:add(f.ann_hop, tvb(start, rd.pos - start))
        h:set_text(string.format("Hop %d: port %s", hops, tostring(port)))
        h:add(f.ann_hop_port, pr, port)
        h:add(f.ann_hop_key, key)
        h:add(f.ann_hop_sig, sig)
    end
    tree:add(f.ann_hops, tvb(offset, limit - offset), hops)
    if rd:remaining() > 0 then
        tree:add_proto_expert_info(e_malformed, string.format("%d bytes left after the last hop", rd:remaining()))
    end
    return string.format("root seq %s, %d hops", tostring(seq), hops)
end

-- Bootstrap (4.6) and wakeup (4.7) payloads: seq, root key, root seq, signature
local function add_signed_root(tree, tvb, offset, limit, fseq, fkey, frseq, fsig)
    local rd = reader(tvb, offset, limit)
    local seq = add_varu64(tree, rd, fseq)
    tree:add(fkey, rd:take(32))
    add_varu64(tree, rd, frseq)
    tree:add(fsig, rd:take(64))
    if rd:remaining() ~= 0 then
        tree:add_proto_expert_info(e_malformed, "payload longer than its fields")
    end
    return seq
end

-- Ping payload (8), inside Traffic
local function add_ping(tree, tvb, offset, plen)
    if plen < 75 or tvb(offset, 8):string() ~= "pineping" then
        return nil
    end
    local p = tree:add(f.ping, tvb(offset, 75))
    local t = tvb(offset + 8, 1):uint()
    p:add(f.ping_type, tvb(offset + 8, 1))
    p:add(f.ping_hops, tvb(offset + 9, 2))
    p:add(f.ping_origin, tvb(offset + 11, 32))
    p:add(f.ping_dest, tvb(offset + 43, 32))
    return string.format("%s hops=%d", t == 0 and "Ping" or "Pong", tvb(offset + 9, 2):uint())
end

local function add_legacy_path_payload(tree, rd, with_dest_sig)
    tree:add(f.lg_path_id, rd:take(8))
    tree:add(f.lg_root_key, rd:take(32))
    add_varu64(tree, rd, f.lg_root_seq)
    tree:add(f.lg_src_sig, rd:take(64))
    if with_dest_sig then
        tree:add(f.lg_dest_sig, rd:take(64))
    end
end

-- One frame body by type; returns a short summary for the Info column.
local function dissect_body(tree, tvb, offset, flen, ftype)
    local limit = offset + flen
    local rd = reader(tvb, offset + HEADER_LEN, limit)
    local name = TYPE_NAMES[ftype] or string.format("Unknown(0x%02x)", ftype)
    if ftype == 0 then
        if flen ~= HEADER_LEN then
            tree:add_proto_expert_info(e_malformed, "keepalive with a body")
        end
        return name
    end
    if TYPE_NAMES[ftype] == nil then
        if flen > HEADER_LEN then
            tree:add(f.body, tvb(offset + HEADER_LEN, flen - HEADER_LEN))
        end
        tree:add_proto_expert_info(e_unknown)
        return name
    end
    local plen = rd:u16()
    tree:add(f.plen, tvb(offset + HEADER_LEN, 2))
    local summary = name
    if ftype == 1 then
        rd:need(plen)
        summary = name .. " " .. add_announcement(tree, tvb, rd.pos, rd.pos + plen)
        rd.pos = rd.pos + plen
    elseif ftype == 2 then
        tree:add(f.dest_key, rd:take(32))
        tree:add(f.wm_key, rd:take(32))
        add_varu64(tree, rd, f.wm_seq)
        rd:need(plen)
        local seq = add_signed_root(tree, tvb, rd.pos, rd.pos + plen, f.bs_seq, f.bs_root_key, f.bs_root_seq, f.bs_sig)
        rd.pos = rd.pos + plen
        summary = name .. " seq " .. tostring(seq)
    elseif ftype == 3 then
        local dc = add_coords(tree, rd, f.dest_coords)
        add_coords(tree, rd, f.src_coords)
        tree:add(f.dest_key, rd:take(32))
        tree:add(f.src_key, rd:take(32))
        local mode = "tree"
        if dc == "[]" then
            mode = "SNEK"
            tree:add(f.wm_key, rd:take(32))
            add_varu64(tree, rd, f.wm_seq)
        end
        rd:need(plen)
        tree:add(f.payload, tvb(rd.pos, plen))
        local ping = add_ping(tree, tvb, rd.pos, plen)
        rd.pos = rd.pos + plen
        summary = string.format("%s (%s)%s", name, mode, ping and (" " .. ping) or "")
    elseif ftype == 4 then
        tree:add(f.src_key, rd:take(32))
        rd:need(plen)
        local seq = add_signed_root(tree, tvb, rd.pos, rd.pos + plen, f.wk_seq, f.wk_root_key, f.wk_root_seq, f.wk_sig)
        rd.pos = rd.pos + plen
        summary = name .. " seq " .. tostring(seq)
    elseif ftype == 0xE0 then
        tree:add(f.lg_path_key, rd:take(32))
        add_coords(tree, rd, f.src_coords)
        rd:need(plen)
        local inner = reader(tvb, rd.pos, rd.pos + plen)
        add_legacy_path_payload(tree, inner, false)
        rd.pos = rd.pos + plen
    elseif ftype == 0xE1 then
        add_coords(tree, rd, f.dest_coords)
        add_coords(tree, rd, f.src_coords)
        tree:add(f.dest_key, rd:take(32))
        tree:add(f.src_key, rd:take(32))
        rd:need(plen)
        add_legacy_path_payload(tree, reader(tvb, rd.pos, rd.pos + plen), true)
        rd.pos = rd.pos + plen
    elseif ftype == 0xE2 then
        add_coords(tree, rd, f.dest_coords)
        tree:add(f.dest_key, rd:take(32))
        tree:add(f.src_key, rd:take(32))
        rd:need(plen)
        add_legacy_path_payload(tree, reader(tvb, rd.pos, rd.pos + plen), true)
        rd.pos = rd.pos + plen
    elseif ftype == 0xE3 then
        tree:add(f.lg_path_key, rd:take(32))
        rd:need(plen)
        tree:add(f.lg_path_id, tvb(rd.pos, plen))
        rd.pos = rd.pos + plen
    end
    if rd:remaining() ~= 0 then
        tree:add_proto_expert_info(e_malformed, string.format("%d bytes after the last field", rd:remaining()))
    end
    return summary
end

local function dissect_handshake(tvb, pinfo, tree)
    local t = tree:add(snek, tvb(0, HANDSHAKE_LEN), "SNEK handshake")
    t:add(f.hs_version, tvb(0, 1))
    local caps = t:add(f.hs_caps, tvb(4, 4))
    for _, bitfield in ipairs({ f.hs_cap_root, f.hs_cap_setups, f.hs_cap_acks, f.hs_cap_coords, f.hs_cap_soft,
        f.hs_cap_hybrid, f.hs_cap_legacy }) do
        caps:add(bitfield, tvb(4, 4))
    end
    t:add(f.hs_key, tvb(8, 32))
    t:add(f.hs_sig, tvb(40, 64))
    if tvb(0, 1):uint() ~= 1 then
        t:add_proto_expert_info(e_malformed, "protocol version is not 1")
    end
    return string.format("Handshake caps=0x%08x", tvb(4, 4):uint())
end

local function dissect_frame(tvb, pinfo, tree)
    local flen = tvb(8, 2):uint()
    local ftype = tvb(5, 1):uint()
    local t = tree:add(snek, tvb(0, flen), "SNEK " .. (TYPE_NAMES[ftype] or "frame"))
    t:add(f.magic, tvb(0, 4))
    t:add(f.version, tvb(4, 1))
    t:add(f.ftype, tvb(5, 1))
    t:add(f.extra, tvb(6, 1))
    t:add(f.hop_limit, tvb(7, 1))
    t:add(f.len, tvb(8, 2))
    local ok, summary = pcall(dissect_body, t, tvb, 0, flen, ftype)
    if not ok then
        t:add_proto_expert_info(e_malformed, summary == Short and "a field runs past the end of the frame"
            or ("cannot decode: " .. tostring(summary)))
        summary = (TYPE_NAMES[ftype] or "frame") .. " [malformed]"
    end
    return summary
end

local function is_magic(tvb, offset)
    return tvb:len() >= offset + 4 and tvb(offset, 4):string() == "pine"
end

-- A frame header can start here: magic, frame version 0, a length of at least 10 (PROTOCOL.md 4.3).
local function valid_header(tvb, offset)
    return tvb:len() >= offset + HEADER_LEN and is_magic(tvb, offset) and tvb(offset + 4, 1):uint() == 0
        and tvb(offset + 8, 2):uint() >= HEADER_LEN
end

-- A handshake starts here: version 1, three zero bytes, the reference's or the legacy experiment's capabilities.
local function valid_handshake(tvb, offset)
    if tvb:len() < offset + 8 or tvb(offset, 4):uint() ~= 0x01000000 then
        return false
    end
    local caps = tvb(offset + 4, 4):uint()
    return caps == 0x3B or caps == 0x8000003B
end

-- Per direction of a connection: the packet in which its bytes first lined up with a PDU. Before that (a
-- capture that started mid-stream) bytes up to the first frame header are a continuation, not an error.
local directions = {}

local function direction_key(pinfo)
    return tostring(pinfo.src) .. ":" .. tostring(pinfo.src_port) .. ">" .. tostring(pinfo.dst) .. ":" ..
        tostring(pinfo.dst_port)
end

-- Length of the PDU at offset: a 104-byte handshake, or a frame's own length field.
local function pdu_len(tvb, pinfo, offset)
    if is_magic(tvb, offset) then
        local flen = tvb(offset + 8, 2):uint()
        if flen < HEADER_LEN then
            return tvb:len() - offset -- cannot resynchronise: the rest is flagged malformed
        end
        return flen
    end
    if tvb(offset, 1):uint() == 1 then
        return HANDSHAKE_LEN
    end
    return tvb:len() - offset
end

local function dissect_pdu(tvb, pinfo, tree)
    pinfo.cols.protocol = "SNEK"
    local summary
    if is_magic(tvb, 0) and tvb:len() >= HEADER_LEN and tvb(8, 2):uint() >= HEADER_LEN then
        summary = dissect_frame(tvb, pinfo, tree)
    elseif tvb:len() == HANDSHAKE_LEN and tvb(0, 1):uint() == 1 then
        summary = dissect_handshake(tvb, pinfo, tree)
    else
        local t = tree:add(snek, tvb(), "SNEK (not a frame)")
        t:add_proto_expert_info(e_malformed, "bytes that are neither a handshake nor a frame")
        summary = "[malformed]"
    end
    local info = tostring(pinfo.cols.info)
    if info:sub(1, 5) == "SNEK:" then
        pinfo.cols.info:append(", " .. summary)
    else
        pinfo.cols.info:set("SNEK: " .. summary)
    end
    return tvb:len()
end

-- TCP reassembly by hand (dissect_tcp_pdus does not desegment when called from a Lua heuristic): whole PDUs
-- are dissected in turn; for a PDU that runs past the segment, TCP is asked for the bytes still missing.
local function dissect_stream(tvb, pinfo, tree, can_desegment)
    local offset, total = 0, tvb:len()
    local key = direction_key(pinfo)
    local synced = directions[key]
    if synced == nil or pinfo.number <= synced then
        -- the first bytes of this direction in the capture: a handshake, a frame, or the tail of a frame the
        -- capture missed the start of (skip to the first frame header)
        if not valid_handshake(tvb, 0) and not valid_header(tvb, 0) then
            local j = 1
            while j + HEADER_LEN <= total and not valid_header(tvb, j) do
                j = j + 1
            end
            if j + HEADER_LEN > total then
                j = total
            end
            local t = tree:add(snek, tvb(0, j), "SNEK continuation (the capture started mid-stream)")
            t:add(f.continuation, tvb(0, j), j)
            t:add_proto_expert_info(e_continuation)
            pinfo.cols.protocol = "SNEK"
            offset = j
        end
        if offset < total and not pinfo.visited then
            directions[key] = pinfo.number
        end
    end
    while offset < total do
        local avail = total - offset
        if avail < HEADER_LEN and can_desegment > 0 then
            pinfo.desegment_offset = offset
            pinfo.desegment_len = DESEGMENT_ONE_MORE_SEGMENT
            return total
        end
        local need = avail < HEADER_LEN and avail or pdu_len(tvb, pinfo, offset)
        if need > avail then
            if can_desegment > 0 then
                pinfo.desegment_offset = offset
                pinfo.desegment_len = need - avail
                return total
            end
            need = avail -- no reassembly available: dissect what is here (flagged malformed)
        end
        dissect_pdu(tvb(offset, need):tvb(), pinfo, tree)
        offset = offset + need
    end
    return offset
end

function snek.dissector(tvb, pinfo, tree)
    return dissect_stream(tvb, pinfo, tree, pinfo.can_desegment)
end

-- A snek connection on any port: its first segment is a handshake (version 1, three zero bytes, the
-- reference's or the legacy experiment's capabilities) or a frame (magic, version 0, a length >= 10).
local function looks_like_snek(tvb)
    if tvb:len() >= 8 and tvb(0, 4):uint() == 0x01000000 then
        local caps = tvb(4, 4):uint()
        return caps == 0x3B or caps == 0x8000003B
    end
    return tvb:len() >= HEADER_LEN and is_magic(tvb, 0) and tvb(4, 1):uint() == 0 and tvb(8, 2):uint() >= HEADER_LEN
end

local function heuristic(tvb, pinfo, tree)
    local can_desegment = pinfo.can_desegment
    if not looks_like_snek(tvb) then
        return false
    end
    pinfo.conversation = snek
    -- read can_desegment here: by the time a nested Lua call reads it, Wireshark 4.0 has reset it to 0
    dissect_stream(tvb, pinfo, tree, can_desegment)
    return true
end

snek:register_heuristic("tcp", heuristic)
-- snekbed's nodes listen on 7000, which Wireshark gives to Gryphon: claim it outright (other ports go through
-- the heuristic, which the install command tells Wireshark to try before port-based dissectors).
DissectorTable.get("tcp.port"):add(7000, snek)
