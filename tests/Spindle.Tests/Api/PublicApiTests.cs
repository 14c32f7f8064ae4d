using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Reflection;

namespace SpindleLib.Tests.Api;

/// <summary>
/// Keeps the public API small and reviewed: the assembly's public surface must match src/Spindle/PublicAPI.Shipped.txt
/// plus PublicAPI.Unshipped.txt. (The Roslyn PublicApiAnalyzers package is not available from the registry this project
/// restores from, so this test plays its part.) To accept a change, run the tests with SPINDLE_UPDATE_PUBLIC_API=1,
/// which rewrites PublicAPI.Unshipped.txt, and review the diff.
/// </summary>
public sealed class PublicApiTests
{
    [Fact]
    public void PublicSurface_MatchesPublicApiFiles()
    {
        string dir = FindSourceDirectory();
        string shippedPath = Path.Combine(dir, "PublicAPI.Shipped.txt");
        string unshippedPath = Path.Combine(dir, "PublicAPI.Unshipped.txt");
        var shipped = ReadLines(shippedPath);
        var unshipped = ReadLines(unshippedPath);
        var actual = Describe(typeof(SpindleTask).Assembly);

        if (Environment.GetEnvironmentVariable("SPINDLE_UPDATE_PUBLIC_API") == "1")
        {
            File.WriteAllLines(unshippedPath, actual.Where(l => !shipped.Contains(l)).OrderBy(l => l, StringComparer.Ordinal));
            return;
        }

        var declared = new HashSet<string>(shipped.Concat(unshipped), StringComparer.Ordinal);
        var missing = actual.Where(l => !declared.Contains(l)).ToList();
        var removed = declared.Where(l => !actual.Contains(l)).ToList();
        Assert.True(missing.Count == 0 && removed.Count == 0,
            "The public API changed. Review it, then run the tests with SPINDLE_UPDATE_PUBLIC_API=1 to record it.\n" +
            "New, not in PublicAPI.*.txt:\n  " + string.Join("\n  ", missing) + "\nListed, but gone:\n  " + string.Join("\n  ", removed));
    }

    [Fact]
    public void EveryPublicMember_HasXmlDocumentation()
    {
        string xmlPath = Path.ChangeExtension(typeof(SpindleTask).Assembly.Location, ".xml");
        Assert.True(File.Exists(xmlPath), "The library must build its XML documentation file: " + xmlPath);
        // GenerateDocumentationFile plus warnings-as-errors already rejects an undocumented public member at build time
        // (CS1591); this checks the file is produced, so that guarantee is in force.
        Assert.Contains("<member name=\"T:SpindleLib.SpindleTask\">", File.ReadAllText(xmlPath), StringComparison.Ordinal);
    }

    private static HashSet<string> ReadLines(string path)
        => File.Exists(path)
            ? new HashSet<string>(File.ReadAllLines(path).Where(l => l.Length > 0 && !l.StartsWith('#')), StringComparer.Ordinal)
            : new HashSet<string>(StringComparer.Ordinal);

    private static string FindSourceDirectory() => Path.Combine(GeneratedFiles.RepositoryRoot(), "src", "Spindle");

    internal static HashSet<string> Describe(Assembly assembly)
    {
        var lines = new HashSet<string>(StringComparer.Ordinal);
        foreach (Type t in assembly.GetExportedTypes())
        {
            lines.Add(Kind(t) + " " + Name(t));
            const BindingFlags Flags = BindingFlags.Public | BindingFlags.Instance | BindingFlags.Static | BindingFlags.DeclaredOnly;
            foreach (MemberInfo m in t.GetMembers(Flags))
            {
                string? line = m switch
                {
                    ConstructorInfo c => $"{Name(t)}.ctor({Params(c)})",
                    MethodInfo mi when !mi.IsSpecialName => $"{Name(t)}.{mi.Name}{GenericArgs(mi)}({Params(mi)}) -> {Name(mi.ReturnType)}{(mi.IsStatic ? " static" : "")}",
                    MethodInfo mi when mi.Name.StartsWith("op_", StringComparison.Ordinal) => $"{Name(t)}.{mi.Name}({Params(mi)}) -> {Name(mi.ReturnType)} static",
                    PropertyInfo p => $"{Name(t)}.{p.Name} : {Name(p.PropertyType)}{(p.GetMethod?.IsPublic == true ? " get" : "")}{(p.SetMethod?.IsPublic == true ? " set" : "")}{((p.GetMethod ?? p.SetMethod)!.IsStatic ? " static" : "")}",
                    FieldInfo f when !t.IsEnum || f.IsStatic => $"{Name(t)}.{f.Name} : {Name(f.FieldType)}",
                    EventInfo e => $"{Name(t)}.{e.Name} event {Name(e.EventHandlerType!)}",
                    _ => null,
                };
                if (line is not null)
                {
                    lines.Add(line);
                }
            }
        }
        return lines;
    }

    private static string Kind(Type t) => t.IsInterface ? "interface" : t.IsEnum ? "enum" : t.IsValueType ? "struct" : t.IsAbstract && t.IsSealed ? "static class" : "class";

    private static string GenericArgs(MethodInfo m) => m.IsGenericMethodDefinition ? "<" + string.Join(", ", m.GetGenericArguments().Select(a => a.Name)) + ">" : "";

    private static string Params(MethodBase m) => string.Join(", ", m.GetParameters().Select(p => Name(p.ParameterType) + " " + p.Name));

    private static string Name(Type t)
    {
        if (t.IsGenericParameter)
        {
            return t.Name;
        }
        if (t.IsByRef)
        {
            return "ref " + Name(t.GetElementType()!);
        }
        if (t.IsArray)
        {
            return Name(t.GetElementType()!) + "[]";
        }
        string name = t.IsNested ? Name(t.DeclaringType!) + "." + t.Name : (t.Namespace is null ? "" : t.Namespace + ".") + t.Name;
        int tick = name.IndexOf('`', StringComparison.Ordinal);
        if (t.IsGenericType)
        {
            string args = string.Join(", ", t.GetGenericArguments().Select(Name));
            name = (tick >= 0 ? name.Remove(tick, name.IndexOf('`', tick) + 2 - tick) : name) + "<" + args + ">";
            name = name.Replace("`1", "", StringComparison.Ordinal).Replace("`2", "", StringComparison.Ordinal);
        }
        return name;
    }
}
