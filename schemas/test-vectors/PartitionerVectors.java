/*
 * Generates schemas/test-vectors/partitioner.json with Apache Kafka's own Java code, so every Ostinato
 * partitioner (Python, and workers in any language) is checked against the real producer, not against itself.
 *
 * Regenerate from the repository root (Java 17+, single-file source launch, kafka-clients on the class path):
 *
 *   java -cp '/root/.cache/ostinato/kafka/4.1.1/libs/*' schemas/test-vectors/PartitionerVectors.java \
 *       > schemas/test-vectors/partitioner.json
 *
 * Each key is serialized by Kafka's StringSerializer (UTF-8, what a producer sends) and partitioned by
 * BuiltInPartitioner.partitionForKey, the producer's keyed path; the result is cross-checked against
 * Utils.toPositive(Utils.murmur2(bytes)) % partitions. Output is pure ASCII: every non-ASCII or control
 * character is written as a JSON \\uXXXX escape (UTF-16 code units, so astral characters become pairs).
 * This source file is ASCII too: non-ASCII keys are spelled with Java escapes.
 */

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.Utils;

public class PartitionerVectors {

    static final int[] PARTITIONS = {1, 2, 3, 4, 7, 8, 12, 16, 64, 100, 1000, 4096};

    /** Keys checked against every partition count: the shapes Ostinato itself writes. */
    static final String[] HEADLINE = {
        "",
        "default/order-1",
        "default/order%2F2024%2F0001",
        "default/order-1/4f9c2a7e-1b3d-4c5e-9f60-7a8b9c0d1e2f/00000000000000000001",
    };

    static List<String> keys() {
        List<String> keys = new ArrayList<>();
        // Every length 0..20 (all four murmur2 tail cases, several full blocks).
        String alphabet = "abcdefghijklmnopqrstuvwxyz";
        for (int n = 0; n <= 20; n++) {
            keys.add(alphabet.substring(0, n));
        }
        // Keys of 2..20 bytes whose blocks and tails have the high bit set (U+00FF is UTF-8 C3 BF): Java bytes
        // are signed and murmur2 masks each with 0xff, so a port that sign-extends fails here.
        for (int n = 2; n <= 20; n += 3) {
            keys.add("z".repeat(n % 2) + "\u00ff".repeat(n / 2));
        }
        // Plain ASCII, including the strings of Kafka's UtilsTest.testMurmur2.
        keys.addAll(Arrays.asList(
            "21", "foobar", "a-little-bit-long-string", "a-little-bit-longer-string",
            "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", "abc", "kafka", "hello world",
            "0", "1", "12345678", "ostinato", "Order-1", "ORDER-1", " ", "~!@#$^&*()_+{}|:<>?`-=[];',.",
            "quote\"and\\backslash", "tab\there", "line\nbreak", "carriage\rreturn", "nul\u0000byte", "del\u007f"));
        // Real Ostinato keys: namespace/workflow_id[/run_id[/event_id]], percent-escaped components.
        keys.addAll(Arrays.asList(
            "default/order-2", "default/order-10", "billing/invoice-2024-0001", "default/",
            "/order-1", "/", "//", "default/100%25", "default/a%2Fb%2Fc", "default/%25%2F%25",
            "default/%252F", "ns%2Fwith%2Fslash/wf", "default/order-1/run-1",
            "default/order-1/4f9c2a7e-1b3d-4c5e-9f60-7a8b9c0d1e2f",
            "default/order-1/4f9c2a7e-1b3d-4c5e-9f60-7a8b9c0d1e2f/00000000000000000002",
            "default/order-1/4f9c2a7e-1b3d-4c5e-9f60-7a8b9c0d1e2f/00000000000000001000",
            "default/order-1/4f9c2a7e-1b3d-4c5e-9f60-7a8b9c0d1e2f/09223372036854775807",
            "default/order-1/charge-card", "default/order-1/1"));
        for (int i = 0; i < 24; i++) {
            keys.add("default/wf-" + i);
        }
        // Multi-byte UTF-8: 2-byte accents, 3-byte CJK, 4-byte emoji (surrogate pairs in Java and JSON).
        keys.addAll(Arrays.asList(
            "caf\u00e9", "na\u00efve", "\u00e9", "\u00c5ngstr\u00f6m", "\u0394\u03b5\u03bb\u03c4\u03b1",
            "\u041f\u0440\u0438\u0432\u0435\u0442", "\u05e9\u05dc\u05d5\u05dd", "\u0645\u0631\u062d\u0628\u0627",
            "\u65e5", "\u65e5\u672c\u8a9e", "\u5de5\u4f5c\u6d41", "\ud55c\uad6d\uc5b4", "\u20ac100",
            "\ud83d\ude00", "\ud83c\udf89 party", "emoji \ud83d\ude80\ud83d\ude80\ud83d\ude80",
            "\ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67", "\ud800\udf48", "\ufeffbom", "\uffff",
            "default/\u6ce8\u6587-42", "\u540d\u524d\u7a7a\u9593/\u30ef\u30fc\u30af\u30d5\u30ed\u30fc",
            "default/caf\u00e9%2Fbar/\ud83d\ude00"));
        // Long keys: 1 KiB and beyond, each tail length, multi-byte repeated.
        keys.add("x".repeat(1024));
        keys.add("y".repeat(1025));
        keys.add("z".repeat(1026));
        keys.add("w".repeat(1027));
        keys.add("default/" + "long-workflow-id-".repeat(64));
        keys.add("\u65e5".repeat(400));
        keys.add("\ud83d\ude00".repeat(300));
        keys.add(alphabet.repeat(158)); // 4108 bytes
        return keys;
    }

    public static void main(String[] args) {
        StringSerializer serializer = new StringSerializer();
        List<String> lines = new ArrayList<>();
        for (String key : HEADLINE) {
            for (int partitions : PARTITIONS) {
                lines.add(vector(serializer, key, partitions));
            }
        }
        List<String> keys = keys();
        for (int i = 0; i < keys.size(); i++) {
            // Three partition counts per key, rotating so every count meets every kind of key.
            for (int j : new int[] {0, 5, 9}) {
                lines.add(vector(serializer, keys.get(i), PARTITIONS[(i + j) % PARTITIONS.length]));
            }
        }
        StringBuilder out = new StringBuilder("[\n");
        for (int i = 0; i < lines.size(); i++) {
            out.append("  ").append(lines.get(i)).append(i + 1 < lines.size() ? ",\n" : "\n");
        }
        out.append("]");
        System.out.println(out);
    }

    static String vector(StringSerializer serializer, String key, int partitions) {
        byte[] bytes = serializer.serialize("ostinato.commands", key);
        if (!Arrays.equals(bytes, key.getBytes(StandardCharsets.UTF_8))) {
            throw new IllegalStateException("StringSerializer is not UTF-8 for " + key);
        }
        int partition = BuiltInPartitioner.partitionForKey(bytes, partitions);
        if (partition != Utils.toPositive(Utils.murmur2(bytes)) % partitions) {
            throw new IllegalStateException("partitionForKey disagrees with murmur2 for " + key);
        }
        return "{\"key\": " + jsonString(key) + ", \"partitions\": " + partitions + ", \"partition\": " + partition + "}";
    }

    static String jsonString(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20 || c > 0x7e) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }
}
